"""The seccomp filter every sandboxed game runs under, handed to bubblewrap (`--seccomp FD`).

It is Docker's default profile (moby's profiles/seccomp/default.json) for a process without
capabilities, made stricter where a game has no use for a call:
- an allow list; any other system call fails with EPERM. Not on it, as in Docker: `keyctl`,
  `add_key`, `request_key` (keyrings are not namespaced), `mount`, `umount2` and the new mount
  API, `unshare`, `setns`, `pivot_root`, `chroot`, `bpf`, `perf_event_open`, `kexec_*`,
  `*_module`, `reboot`, `swapon`/`swapoff`, `acct`, `clock_settime`, `settimeofday`,
  `open_by_handle_at`, `userfaultfd`, `quotactl`, `syslog`, `iopl`...;
- stricter than Docker: `ptrace`, `process_vm_readv/writev`, `name_to_handle_at` and
  `io_uring_*` are refused too, and only the native ABI is allowed (an x32 or i386 system call
  kills the process: Docker allows both);
- `clone` only without namespace flags; `clone3` answers ENOSYS (its flags are in memory a
  filter cannot read), so the C library falls back to `clone`;
- `personality` only with the values Docker allows; `socket` of any family but AF_VSOCK.

Built with libseccomp (PyPI `pyseccomp`, a ctypes binding to Debian's libseccomp2) once per
agent process, into a BPF file the keepers open for bubblewrap.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# Docker's unconditional allow list, less what is refused above (ptrace, process_vm_*,
# name_to_handle_at, io_uring_*). Names the running kernel's ABI lacks (the 32-bit ones on
# x86_64) are skipped.
_ALLOWED_NAMES = """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2
dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64
fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchown fchown32 fchownat fcntl
fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstat64
fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_time64 futex_waitv
futimesat getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid
getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid
getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list
getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32
getxattr inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl
io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup
io_submit ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek
lsetxattr lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat
mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap
msgctl msgget msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect
open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free
pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease
pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv
recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat
renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo
rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
sched_getaffinity sched_getattr sched_getparam sched_get_priority_max sched_get_priority_min
sched_getscheduler sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity
sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop
semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid
setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid
setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4
sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statx symlink
symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 timerfd_create
timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate
truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes
vfork vmsplice wait4 waitid waitpid write writev
arch_prctl modify_ldt
"""
ALLOWED = tuple(_ALLOWED_NAMES.split())
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (Docker's 2114060288).
CLONE_NAMESPACE_FLAGS = 0x7E020000
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Linux, UNAME26, ..., query
AF_VSOCK = 40
FILTER_FILE = "seccomp.bpf"


class SeccompUnavailable(RuntimeError):
    """libseccomp (Debian's libseccomp2) is missing: the node cannot build the filter."""


def write_filter(path: Path) -> Path:
    """The filter, compiled to BPF at `path` (0600, replaced whole)."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError) as error:  # RuntimeError: no libseccomp.so
        raise SeccompUnavailable(f"no libseccomp ({error})") from error
    rules = seccomp.SyscallFilter(seccomp.ERRNO(errno.EPERM))
    rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    for name in ALLOWED:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:
            rules.add_rule(seccomp.ALLOW, name)
    rules.add_rule(
        seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0)
    )
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for persona in PERSONALITIES:
        rules.add_rule(seccomp.ALLOW, "personality", seccomp.Arg(0, seccomp.EQ, persona))
    rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.NE, AF_VSOCK))
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        rules.export_bpf(file)
    os.replace(temporary, path)
    return path
