"""The sandbox's seccomp policy, an allowlist assembled with libseccomp for ``--seccomp``.

The policy is three tables, read top to bottom when auditing (a test checks the compiled
filter against each entry, for x86-64 and arm64):

- :data:`ALLOWED`: the system calls of Docker's default profile, less those this sandbox
  refuses. Anything not listed (including calls newer than this list) fails with
  ``ENOSYS``, as if the kernel lacked it, so programs take their fallback path;
- :data:`DENIED`: calls that fail with ``EPERM``: tracing or reading other processes
  (``ptrace``, ``process_vm_*``, ``kcmp``, ``pidfd_getfd``), mounting, namespaces
  (``unshare``, ``setns``, ``clone`` with a namespace flag), the kernel keyring, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, io_uring, modules, ``kexec``, clock, swap,
  quota, host name, NUMA policy, and ``socketpair``;
- sockets: ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` are allowed, ``AF_UNIX`` fails with
  ``EPERM`` (no way to a host daemon's socket), other families with ``EAFNOSUPPORT``.
  Only the low 32 bits of the family are compared, as the kernel reads an ``int``.

A call from another ABI (i386 or x32 on x86-64) kills the process: those ABIs number
calls differently. ``clone3`` fails with ``ENOSYS`` (its flags are out of a filter's
reach; the C library falls back to ``clone``, whose flags are checked). ``personality``
is allowed only for the values Docker allows.

libseccomp (Debian's ``libseccomp2``) compiles the tables into BPF, through the
``pyseccomp`` ctypes binding; it is loaded on first use, never at import.
"""

from __future__ import annotations

import errno
import functools
import platform
import tempfile
from typing import Any

ALLOWED: tuple[str, ...] = (
    "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "capget", "capset",
    "chdir", "chmod", "chown", "clock_adjtime", "clock_getres", "clock_gettime",
    "clock_nanosleep", "close", "close_range", "connect", "copy_file_range", "creat", "dup",
    "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait",
    "epoll_pwait2", "epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit",
    "exit_group", "faccessat", "faccessat2", "fadvise64", "fallocate", "fanotify_mark",
    "fchdir", "fchmod", "fchmodat", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr",
    "flistxattr", "flock", "fork", "fremovexattr", "fstat", "fstatfs", "fsync",
    "ftruncate", "futex", "futex_waitv", "futimesat", "getcpu", "getcwd", "getdents",
    "getdents64", "getegid", "geteuid", "getgid", "getgroups", "getitimer", "getpeername",
    "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getresgid",
    "getresuid", "getrlimit", "get_robust_list", "getrusage", "getsid", "getsockname",
    "getsockopt", "get_thread_area", "gettid", "gettimeofday", "getuid", "getxattr",
    "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
    "ioctl", "io_destroy", "io_getevents", "io_pgetevents", "ioprio_get", "ioprio_set",
    "io_setup", "io_submit", "kill", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self", "lchown", "lgetxattr", "link", "linkat", "listen", "listxattr",
    "llistxattr", "lremovexattr", "lseek", "lstat", "madvise", "membarrier",
    "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat",
    "mlock", "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
    "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl", "msgget",
    "msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at",
    "nanosleep", "newfstatat", "open", "openat", "openat2", "pause", "pidfd_open",
    "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll",
    "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64", "process_mrelease",
    "pselect6", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
    "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "remap_file_pages",
    "removexattr", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq",
    "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
    "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_getaffinity",
    "sched_getattr", "sched_getparam", "sched_get_priority_max", "sched_get_priority_min",
    "sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity", "sched_setattr",
    "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl",
    "semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto",
    "setfsgid", "setfsuid", "setgid", "setgroups", "setitimer", "setpgid", "setpriority",
    "setregid", "setresgid", "setresuid", "setreuid", "setrlimit", "set_robust_list",
    "setsid", "setsockopt", "set_thread_area", "set_tid_address", "setuid",
    "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
    "signalfd4", "splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync",
    "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create",
    "timer_delete", "timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create",
    "timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask", "uname",
    "unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
    "waitid", "write", "writev",
    # x86-64 only (skipped where they do not exist)
    "arch_prctl", "modify_ldt",
)  # fmt: skip
"""Allowed unconditionally (names a libseccomp or an architecture does not know are skipped)."""

DENIED: tuple[str, ...] = (
    # tracing and reading other processes: the sandbox's PID 1 among them
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp",
    "pidfd_getfd",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    # kernel attack surface with no use in a build or a test
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "lookup_dcookie",
    "open_by_handle_at", "fanotify_init",
    # the machine itself
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
    "settimeofday", "clock_settime", "iopl", "ioperm", "sethostname", "setdomainname",
    "vhangup", "get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node",
    "move_pages", "migrate_pages", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
    # Unix sockets come in pairs only
    "socketpair",
)  # fmt: skip
"""Fail with ``EPERM``."""

XATTR_SETTERS: tuple[str, ...] = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")
"""Fail with ``EOPNOTSUPP`` (as on a file system without extended attributes, which
``cp -a`` and ``tar`` take in their stride) unless ``xattrs=True``: an attribute costs
the kernel memory that no size cap counts."""

AF_UNIX = 1
SOCKET_FAMILIES_ALLOWED: tuple[int, ...] = (2, 10, 16)
"""``AF_INET``, ``AF_INET6``, ``AF_NETLINK``."""
SOCKET_FAMILY_MAX = 64
"""Families 0 to 63 get a rule each; the kernel knows fewer."""
CLONE_NAMESPACE_FLAGS = 0x7E020000
"""``CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET``."""
PERSONALITIES_ALLOWED: tuple[int, ...] = (0, 8, 0x20000, 0x20008, 0xFFFFFFFF)
"""Linux, with ``UNAME26`` or ``PER_LINUX32``, and the query."""
_LOW32 = 0xFFFFFFFF
_MACHINES = {"x86_64": "X86_64", "aarch64": "AARCH64"}


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built here: a known architecture and libseccomp present."""
    if (machine or platform.machine()) not in _MACHINES:
        return False
    try:
        _libseccomp()
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def why_unsupported() -> str:
    """One sentence for people: why :func:`supported` is false."""
    if platform.machine() not in _MACHINES:
        return f"no seccomp policy for the {platform.machine()} architecture"
    return "libseccomp is not installed: install the Debian package 'libseccomp2'"


@functools.cache
def build_filter(machine: str | None = None, *, xattrs: bool = False) -> bytes:
    """The BPF program (``struct sock_filter`` array) for ``machine`` (default: this one);
    ``xattrs=True`` allows setting extended attributes."""
    name = machine or platform.machine()
    if name not in _MACHINES:
        raise ValueError(f"no seccomp filter for the {name} architecture")
    sc = _libseccomp()
    arch = getattr(sc.Arch, _MACHINES[name])
    filt = sc.SyscallFilter(sc.ERRNO(errno.ENOSYS))
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    if arch != sc.system_arch():
        filt.add_arch(arch)
        filt.remove_arch(sc.Arch.NATIVE)
    for syscall in ALLOWED:
        _add(sc, filt, sc.ALLOW, syscall)
    for syscall in DENIED:
        _add(sc, filt, sc.ERRNO(errno.EPERM), syscall)
    for syscall in XATTR_SETTERS:
        _add(sc, filt, sc.ALLOW if xattrs else sc.ERRNO(errno.EOPNOTSUPP), syscall)
    # clone3 is left to the default (ENOSYS): libseccomp refuses a rule equal to it
    _add(sc, filt, sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    for bit in range(32):
        if CLONE_NAMESPACE_FLAGS & (1 << bit):
            flag = 1 << bit
            _add(sc, filt, sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for value in PERSONALITIES_ALLOWED:
        _add(sc, filt, sc.ALLOW, "personality", sc.Arg(0, sc.MASKED_EQ, _LOW32, value))
    for family in range(SOCKET_FAMILY_MAX):
        if family in SOCKET_FAMILIES_ALLOWED:
            action = sc.ALLOW
        else:
            action = sc.ERRNO(errno.EPERM if family == AF_UNIX else errno.EAFNOSUPPORT)
        _add(sc, filt, action, "socket", sc.Arg(0, sc.MASKED_EQ, _LOW32, family))
    with tempfile.TemporaryFile() as out:
        filt.export_bpf(out)
        out.seek(0)
        return out.read()


def _add(sc: Any, filt: Any, action: int, syscall: str, *args: Any) -> None:
    number = sc.resolve_syscall(sc.Arch.NATIVE, syscall)
    if number == -1:  # __NR_SCMP_ERROR: unknown to this libseccomp
        return
    filt.add_rule(action, number, *args)


@functools.cache
def _libseccomp() -> Any:
    import pyseccomp  # type: ignore[import-untyped]  # loads libseccomp.so.2

    return pyseccomp
