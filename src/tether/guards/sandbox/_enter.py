"""How a command sandbox's bwrap gets into the holder: enter its user and mount
namespaces, unshare a mount namespace of its own, mount its own capped scratch space
(``/tmp``, ``/dev/shm``, ``/run``: bwrap cannot pass ``nr_inodes``), exec bwrap.

Where Perl is (Debian's ``perl-base`` is essential), one Perl process does all of it with
raw system calls, and also drops root for the sandbox's user (so tether starts it with
``vfork``: a ``fork`` that changes user copies tether's page tables, milliseconds of CPU
per sandbox in a large process). The chain of ``nsenter``, ``unshare``, ``sh``,
``mount`` and ``mkdir`` it replaces costs five process starts, more CPU than the bwrap it
leads to; it is used where Perl is not.
"""

from __future__ import annotations

import functools
import platform
import shutil
from collections.abc import Sequence

from tether.guards.sandbox.base import SandboxLimits

SCRATCH = "/.tether-scratch"
"""Where, in the holder, each command sandbox mounts its own /tmp, /dev/shm and /run."""
RUN_BYTES = 1 << 20
"""What /run may hold (it shares the scratch space with /tmp and /dev/shm)."""
_SCRATCH_DIRS = ("tmp", "shm", "run")
_SYSCALLS = {"x86_64": (308, 272, 165, 116, 119, 117), "aarch64": (268, 97, 40, 159, 149, 147)}
"""``setns``, ``unshare``, ``mount``, ``setgroups``, ``setresgid``, ``setresuid`` by
architecture."""
_CLONE_NEWUSER, _CLONE_NEWNS, _MS_REC_PRIVATE = 0x10000000, 0x20000, 0x44000
_PERL = """
my ($gate, $uid, $gid, $user, $mnt, $scratch, $options) = splice(@ARGV, 0, 7);
sub fail { print STDERR "tether-scratch: $_[0]: $!\\n"; exit 125 }
if ($gate >= 0) {
    open(my $g, "<&=", $gate) or fail("gate");
    defined(<$g>) or exit 125;
    close($g);
}
if ($uid >= 0) {
    syscall(SETGROUPS, 0, 0) == 0 or fail("setgroups");
    syscall(SETRESGID, 0+$gid, 0+$gid, 0+$gid) == 0 or fail("setresgid");
    syscall(SETRESUID, 0+$uid, 0+$uid, 0+$uid) == 0 or fail("setresuid");
}
for my $ns ([$user, NEWUSER], [$mnt, NEWNS]) {
    open(my $fh, "<&=", $ns->[0]) or fail("namespace descriptor");
    syscall(SETNS, fileno($fh), $ns->[1]) == 0 or fail("enter the holder");
    close($fh);
}
syscall(UNSHARE, NEWNS) == 0 or fail("unshare the mount namespace");
my ($none, $root, $fs, $name) = ("none", "/", "tmpfs", "tether-scratch");
syscall(MOUNT, $none, $root, 0, PRIVATE, 0) == 0 or fail("make the mounts private");
syscall(MOUNT, $name, $scratch, $fs, 0, $options) == 0 or fail("mount $scratch");
for my $dir (DIRS) {
    mkdir("$scratch/$dir") && chmod(01777, "$scratch/$dir") or fail("mkdir $dir");
}
exec { $ARGV[0] } @ARGV or fail("exec $ARGV[0]");
"""
_CHAIN = (
    "mount -t tmpfs -o {options} tether-scratch {scratch} "
    "&& mkdir -m 1777 {scratch}/tmp {scratch}/shm {scratch}/run "
    '&& exec "$@"'
)


def scratch_options(limits: SandboxLimits) -> str:
    """The scratch space's tmpfs options: its bytes and its inodes capped."""
    size = limits.tmp_bytes + limits.shm_bytes + RUN_BYTES
    return f"size={size},nr_inodes={limits.scratch_inodes},mode=0755"


def scratch_script(limits: SandboxLimits) -> str:
    """The shell script of the chain that mounts a command sandbox's scratch space."""
    return _CHAIN.format(options=scratch_options(limits), scratch=SCRATCH)


@functools.cache
def perl() -> str | None:
    """The Perl that enters a holder in one process, if this host has one (and a known
    architecture)."""
    if platform.machine() not in _SYSCALLS:
        return None
    return shutil.which("perl")


@functools.cache
def _perl_script(machine: str) -> str:
    setns, unshare, mount, setgroups, setresgid, setresuid = _SYSCALLS[machine]
    script = _PERL
    for name, value in (
        ("SETNS", setns), ("UNSHARE", unshare), ("MOUNT", mount), ("SETGROUPS", setgroups),
        ("SETRESGID", setresgid), ("SETRESUID", setresuid),
        ("NEWUSER", _CLONE_NEWUSER), ("NEWNS", _CLONE_NEWNS), ("PRIVATE", _MS_REC_PRIVATE),
    ):  # fmt: skip
        script = script.replace(name, str(value))
    return script.replace("DIRS", ", ".join(f'"{d}"' for d in _SCRATCH_DIRS))


def drops_root(chain: bool = False) -> bool:
    """Whether :func:`enter_argv` can be started as root and become ``run_as`` itself."""
    return not chain and perl() is not None


def enter_argv(
    ns_fds: tuple[int, int],
    limits: SandboxLimits,
    *,
    gate_fd: int = -1,
    run_as: int | None = None,
    chain: bool = False,
) -> list[str]:
    """The command line, followed by bwrap's, that enters the holder whose user and mount
    namespaces are open as ``ns_fds``, mounts a fresh scratch space, and execs the rest.
    With ``gate_fd``, it first waits for a line there (tether moves it into its cgroup
    meanwhile); with ``run_as`` (only where :func:`drops_root`), it then becomes that user
    and group, with no other group. ``chain=True``, or no Perl here: the chain of
    utilities."""
    user_fd, mnt_fd = ns_fds
    if drops_root(chain):
        uid = -1 if run_as is None else run_as
        return [
            str(perl()), "-e", _perl_script(platform.machine()), "--", str(gate_fd),
            str(uid), str(uid), str(user_fd), str(mnt_fd), SCRATCH, scratch_options(limits),
        ]  # fmt: skip
    if run_as is not None:
        raise ValueError("the chain of utilities cannot change user: start it as run_as")
    argv = [
        "nsenter", f"--user=/proc/self/fd/{user_fd}", f"--mount=/proc/self/fd/{mnt_fd}",
        "--preserve-credentials", "--", "unshare", "--mount", "--propagation", "private", "--",
        "/bin/sh", "-c", scratch_script(limits), "tether-scratch",
    ]  # fmt: skip
    if gate_fd >= 0:
        argv = ["/bin/bash", "-c", f'read -r _ <&{gate_fd} && exec "$@"', "gate", *argv]
    return argv


def tools_present(bwrap: str) -> bool:
    """Whether what :func:`enter_argv` runs is here."""
    needed: Sequence[str] = (bwrap,) if perl() else (bwrap, "nsenter", "unshare", "mount")
    return all(shutil.which(name) is not None for name in needed)
