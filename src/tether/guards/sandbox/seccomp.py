"""A small seccomp filter, assembled by hand as classic BPF for bubblewrap's ``--seccomp``.

Why by hand: the program is twenty instructions, needs no library in the virtual
environment (Debian's ``python3-seccomp`` serves only the system Python) and is easy to
audit. What it does, in order:

1. a system call from a foreign ABI (i386 or x32 on x86-64) kills the process: those ABIs
   have other call numbers (and i386 multiplexes sockets through ``socketcall``, whose
   arguments a filter cannot read), so they would slip past the checks below;
2. ``socket`` and ``socketpair`` with domain ``AF_UNIX`` fail with ``EPERM``: no Unix
   socket can be created, so none can reach a host daemon (Docker, D-Bus, an agent);
3. a few calls that only widen the kernel's attack surface fail with ``EPERM``: the
   kernel keyring (not namespaced), io_uring, userfaultfd, perf_event_open, bpf;
4. everything else is allowed.

Only the low 32 bits of the domain are compared: the kernel reads ``int domain``, so
setting the high bits must not bypass the check.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000

AF_UNIX = 1
X32_SYSCALL_BIT = 0x40000000

# offsets in struct seccomp_data
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LOW = 16  # little-endian: the low half of args[0]


@dataclass(frozen=True, slots=True)
class _Arch:
    audit_arch: int
    socket: int
    socketpair: int
    denied: tuple[int, ...]
    x32: bool


_ARCHES: dict[str, _Arch] = {
    # keyctl, add_key, request_key, io_uring_setup/enter/register, userfaultfd,
    # perf_event_open, bpf
    "x86_64": _Arch(0xC000003E, 41, 53, (250, 248, 249, 425, 426, 427, 323, 298, 321), True),
    "aarch64": _Arch(0xC00000B7, 198, 199, (219, 217, 218, 425, 426, 427, 282, 241, 280), False),
}


def supported() -> bool:
    """Whether a filter can be built for this machine's architecture."""
    return platform.machine() in _ARCHES


def build_filter(machine: str | None = None) -> bytes:
    """The BPF program (``struct sock_filter`` array) for ``machine`` (default: this one)."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        raise ValueError(f"no seccomp filter for the {machine or platform.machine()} architecture")
    deny = RET_ERRNO | errno.EPERM
    # (opcode, jump-if-true label, jump-if-false label, k); labels resolved below
    prog: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, _OFF_ARCH),
        (_JEQ_K, None, "kill", arch.audit_arch),
        (_LD_W_ABS, None, None, _OFF_NR),
    ]
    if arch.x32:
        prog.append((_JGE_K, "kill", None, X32_SYSCALL_BIT))
    prog.append((_JEQ_K, "domain", None, arch.socket))
    prog.append((_JEQ_K, "domain", None, arch.socketpair))
    prog.extend((_JEQ_K, "deny", None, nr) for nr in arch.denied)
    prog.append((_RET_K, None, None, RET_ALLOW))
    labels = {"domain": len(prog)}
    prog.append((_LD_W_ABS, None, None, _OFF_ARG0_LOW))
    prog.append((_JEQ_K, "deny", None, AF_UNIX))
    prog.append((_RET_K, None, None, RET_ALLOW))
    labels["deny"] = len(prog)
    prog.append((_RET_K, None, None, deny))
    labels["kill"] = len(prog)
    prog.append((_RET_K, None, None, RET_KILL_PROCESS))

    def offset(at: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - at - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(prog)
    )
