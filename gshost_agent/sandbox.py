"""Every game in a sandbox: what the node can do, and the command line that seals a game in.

A sandboxed game runs, from the outside in:
- in a network namespace of its own (`gshost_agent.netns`), entered with util-linux's
  `nsenter`: only its port is forwarded to it from the node's addresses;
- as its server's own unprivileged uid and gid (`setpriv`, `gshost_agent.identities`), without
  capabilities and with `no_new_privs` (setuid binaries give nothing). Root runs nothing after
  that, and root's helpers run from `/` with a fixed environment (`gshost_agent.keeper`);
- under Debian's `bubblewrap`, run as that user: a user namespace mapping that uid to itself
  and allowing no new ones, PID, IPC, UTS and mount namespaces, a read-only system (`/usr`,
  `/etc` and the links to them), its server directory at `/server` (its cwd, a filesystem of
  its own: `gshost_agent.disks`) the only place it writes that lasts, the template's files
  read-only at `/game` (from the games' tmpfs), and a private `/tmp` and `/dev/shm` (tmpfs,
  sized to its memory limit, counted in its memory cgroup and gone when it stops). Nothing
  else of the node (the agent's data, the control plane's checkout, other servers) exists in
  there, and no path of the agent's data directory shows in its `/proc/self/mountinfo`.
  bubblewrap gives the game the template's environment, and loads the seccomp filter
  (`gshost_agent.seccomp`);
- in cgroups of its own (memory, pids, cpu), which the keeper makes and enters.

Without these means (an agent that is not root, or the tools missing: scripts/ensure-sandbox.sh
installs them) the agent refuses to start games, unless AGENT_ALLOW_UNSANDBOXED=true.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gshost_agent import disks, seccomp

SANDBOXED = "sandboxed"
UNSANDBOXED = "unsandboxed"
TOOLS = (
    *("bwrap", "nsenter", "setpriv", "ip", "env"),
    *("iptables", "iptables-restore", "ip6tables", "ip6tables-restore"),
)
# The system a game sees, read-only; what else the root holds is invisible to it.
SYSTEM_DIRECTORIES = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What the sandbox makes itself: nothing is created in or above these.
GAME_TMP, GAME_SHM = "/tmp", "/dev/shm"  # noqa: S108 (the game's own, inside its sandbox)
SECCOMP_FD_PLACEHOLDER = "{seccomp_fd}"
# Where its own directory and its template's files are, inside: the same on every node.
SERVER_DIR_INSIDE, GAME_FILES_INSIDE = "/server", "/game"
# bubblewrap's two processes (its monitor and the namespace's init) count in the game's pids.
SANDBOX_PROCESSES = 2


class SandboxUnavailable(RuntimeError):
    """This node cannot sandbox games and was not told to run them unsandboxed."""


@dataclass(frozen=True)
class Sandboxing:
    """What the node can do. `tools`: each tool's path, when it has them all."""

    sandboxed: bool
    reason: str = ""  # why not, when not
    allow_unsandboxed: bool = False
    tools: tuple[tuple[str, str], ...] = ()
    seccomp_filter: str = ""  # the node's BPF file (gshost_agent.seccomp), once it is built

    @property
    def level(self) -> str:
        return SANDBOXED if self.sandboxed else UNSANDBOXED

    def describe(self) -> str:
        """The node's isolation as its heartbeat and Django admin say it (at most 100
        characters)."""
        if self.sandboxed:
            return (
                "sandboxed: namespaces (pid, ipc, mount, net; no user ns), cgroups, seccomp, "
                "uid per server"
            )
        allowed = " (allowed by AGENT_ALLOW_UNSANDBOXED)" if self.allow_unsandboxed else ""
        return f"unsandboxed{allowed}: {self.reason}"[:100]

    def check_can_start(self) -> None:
        if not self.sandboxed and not self.allow_unsandboxed:
            raise SandboxUnavailable(
                f"this node cannot sandbox games ({self.reason}); "
                "scripts/ensure-sandbox.sh installs what it needs"
            )

    def tool(self, name: str) -> str:
        return dict(self.tools)[name]


def detect(
    *, privileged: bool, has_cgroups: bool, allow_unsandboxed: bool, off: bool = False
) -> Sandboxing:
    if off:
        return Sandboxing(False, "turned off (AGENT_SANDBOX=off)", allow_unsandboxed)
    if not privileged:
        reason = "the agent does not run as root"
        return Sandboxing(False, reason, allow_unsandboxed)
    found = {name: shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") for name in TOOLS}
    missing = sorted(name for name, path in found.items() if path is None)
    if missing:
        return Sandboxing(False, "missing " + ", ".join(missing), allow_unsandboxed)
    if not has_cgroups:
        return Sandboxing(False, "no writable cgroup hierarchy", allow_unsandboxed)
    disk_tools = disks.find_tools()
    if disk_tools is None:
        reason = "no loop devices or e2fsprogs (a filesystem per server)"
        return Sandboxing(False, reason, allow_unsandboxed)
    if not Path("/proc/self/ns/net").exists():
        return Sandboxing(False, "no network namespaces", allow_unsandboxed)
    if refused := user_namespaces_refused():
        return Sandboxing(False, refused, allow_unsandboxed)
    tools = tuple((name, str(path)) for name, path in found.items()) + tuple(disk_tools.items())
    return Sandboxing(True, "", allow_unsandboxed, tools)


def user_namespaces_refused(proc_sys: Path = Path("/proc/sys")) -> str:
    """Why bubblewrap, run as a server's user, could not make the game's user namespace (""
    when it can): the kernel's switches for unprivileged user namespaces."""
    switches = {
        "user/max_user_namespaces": lambda value: int(value) > 0,
        "kernel/unprivileged_userns_clone": lambda value: value == "1",  # Debian's older kernels
        "kernel/apparmor_restrict_unprivileged_userns": lambda value: value == "0",  # Ubuntu's
    }
    for name, allows in switches.items():
        try:
            value = (proc_sys / name).read_text().strip()
        except OSError:
            continue  # a kernel without the switch
        if not allows(value):
            return f"no unprivileged user namespaces ({name.replace('/', '.')} = {value})"
    return ""


def with_seccomp(sandboxing: Sandboxing, path: Path) -> Sandboxing:
    """`sandboxing` with the node's seccomp filter, built once at `path`; a node that cannot
    build it cannot sandbox."""
    if not sandboxing.sandboxed:
        return sandboxing
    try:
        built = seccomp.write_filter(path)
    except (seccomp.SeccompUnavailable, OSError) as error:
        return Sandboxing(False, f"no seccomp filter: {error}", sandboxing.allow_unsandboxed)
    return dataclasses.replace(sandboxing, seccomp_filter=str(built))


@dataclass(frozen=True)
class GameBox:
    """One game's sandbox: where it lives and who it runs as."""

    netns: Path  # the network namespace's file (/run/netns/NAME)
    server_dir: Path
    game_files: Path
    uid: int  # the server's own (gshost_agent.identities)
    gid: int
    memory_mb: int
    environment: dict[str, str] = field(default_factory=dict)  # the template's, for the game


def sandboxed_command(sandboxing: Sandboxing, box: GameBox, argv: Iterable[str]) -> list[str]:
    """`argv` run inside `box`: an argument list, never a shell line. Root only enters the
    network namespace and drops to the server's ids: bubblewrap already runs as the server's
    user (in a user namespace of its own, mapped to that same uid), and the template's
    environment is set by bubblewrap for the game alone (`--clearenv`, `--setenv`)."""
    command = [
        sandboxing.tool("nsenter"),
        f"--net={box.netns}",
        "--",
        sandboxing.tool("setpriv"),
        f"--reuid={box.uid}",
        f"--regid={box.gid}",
        f"--groups={box.gid}",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        sandboxing.tool("bwrap"),
        "--unshare-user",
        "--disable-userns",
        "--seccomp",
        SECCOMP_FD_PLACEHOLDER,  # the keeper's descriptor of the filter (`seccomp_argument`)
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "gshost-game",
        "--die-with-parent",
    ]
    command += _file_system(box)
    command += ["--clearenv"]
    for name, value in sorted(box.environment.items()):
        command += ["--setenv", name, value]
    command += ["--chdir", SERVER_DIR_INSIDE, "--"]
    # The keeper has bubblewrap ignore stop signals (the game's to handle): reset them.
    command += [sandboxing.tool("env"), "--default-signal", "--", *argv]
    return command


def seccomp_argument(command: list[str]) -> int:
    """Where in `command` the keeper writes its descriptor of the seccomp filter."""
    return command.index(SECCOMP_FD_PLACEHOLDER)


def _file_system(box: GameBox) -> list[str]:
    tmpfs_bytes = str(box.memory_mb << 20)  # at most its memory; the cgroup counts it anyway
    command: list[str] = []
    for directory in SYSTEM_DIRECTORIES:
        command += ["--ro-bind", directory, directory]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            command += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            command += ["--ro-bind", link, link]
    command += ["--proc", "/proc", "--dev", "/dev"]
    command += ["--perms", "1777", "--size", tmpfs_bytes, "--tmpfs", GAME_TMP]
    command += ["--perms", "1777", "--size", tmpfs_bytes, "--tmpfs", GAME_SHM]
    # bubblewrap runs as the server's user: the sandbox's root read-only, so the game can change
    # nothing of it (the mount points it makes for /server and /game included).
    command += ["--bind", str(box.server_dir), SERVER_DIR_INSIDE]
    command += ["--ro-bind", str(box.game_files), GAME_FILES_INSIDE]
    command += ["--remount-ro", "/"]
    return command
