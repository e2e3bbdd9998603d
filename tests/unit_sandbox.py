"""Run a command as a systemd unit's [Service] section would, where systemd cannot run units (this VM's
PID 1 is not systemd): what decides whether the exporter can start and serve is applied for real.

As root, `command(unit, argv)` builds:
    unshare -m (a mount namespace of its own), then in it: the sources of BindReadOnlyPaths= taken
    first, as systemd takes them from the host before it hides anything; every mount read-only
    (ProtectSystem=strict, ProtectHome=read-only, ProtectKernelTunables), a private /tmp and /var/tmp
    (PrivateTmp), a /dev of the few pseudo-devices (PrivateDevices); then the binds, read-only, at their
    destinations (made in the private /tmp where they lie there); then setpriv: the dynamic user's uid
    and gid (DynamicUser), no groups, the ambient, inheritable and bounding capability sets
    (AmbientCapabilities, CapabilityBoundingSet), no_new_privs (NoNewPrivileges), the umask; then this
    module's code (given to the interpreter with -c: its file may lie where the unit hides) run by the
    interpreter the unit's command runs with, as that user: MemoryDenyWriteExecute (the kernel's
    PR_SET_MDWE, which systemd also uses), the system call filter (SystemCallFilter's groups as
    `systemd-analyze syscall-filter` lists them, allowed and denied, with RestrictAddressFamilies on
    socket()), loaded with libseccomp; then exec of the command.

Not applied: namespaces the filter would refuse to make anyway, ProtectClock, ProtectHostname,
ProtectKernelLogs/Modules (they take away what the exporter never uses), IPAddressDeny."""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

UID = 61234  # in systemd's range for dynamic users (61184-65519)
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
SCMP_ACT_ALLOW = 0x7FFF0000
FAMILIES = {"AF_UNIX": socket.AF_UNIX, "AF_INET": socket.AF_INET, "AF_INET6": socket.AF_INET6,
            "AF_NETLINK": socket.AF_NETLINK, "AF_PACKET": socket.AF_PACKET}


def service(unit: Path) -> dict[str, list[str]]:
    """[Service] settings, each with every value it was given (SystemCallFilter= may come twice)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            k, _, v = line.partition("=")
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def _syscalls(group: str) -> set[str]:
    """A system call group (or one call) as this host's systemd resolves it, groups within expanded."""
    if not group.startswith("@"):
        return {group}
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True,
                         check=True).stdout
    calls: set[str] = set()
    for line in out.splitlines():
        w = line.strip()
        if not w or w.startswith("#") or line[:1] not in (" ", "\t"):
            continue
        calls |= _syscalls(w) if w.startswith("@") else {w}
    return calls


def allowed_syscalls(settings: dict[str, list[str]]) -> set[str]:
    allow: set[str] | None = None
    deny: set[str] = set()
    for v in settings.get("SystemCallFilter", []):
        if v.startswith("~"):
            for g in v[1:].split():
                deny |= _syscalls(g)
        else:
            names = set().union(*(_syscalls(g) for g in v.split()))
            allow = names if allow is None else allow | names
    assert allow is not None, "no SystemCallFilter allow list"
    return allow - deny


def bind_paths(settings: dict[str, list[str]], key: str = "BindReadOnlyPaths") -> list[tuple[str, str]]:
    """(source, destination) of each bind, as systemd reads the setting: space-separated, each a double-quoted
    path (spaces and colons kept) or SOURCE[:DEST[:OPTIONS]] with `\\:` for a colon; %% is %. A leading -
    (ignore a missing source) is dropped: the sandbox fails on a missing source as the test should."""
    out = []
    for value in settings.get(key, []):
        for quoted, bare in re.findall(r'"((?:[^"\\]|\\.)*)"|(\S+)', value):
            if quoted or not bare:
                src = dst = re.sub(r"\\(.)", r"\1", quoted)
            else:
                parts = [re.sub(r"\\(.)", r"\1", x) for x in re.split(r"(?<!\\):", bare)]
                src, dst = parts[0], parts[1] if len(parts) > 1 and parts[1] else parts[0]
            src, dst = src.removeprefix("-").replace("%%", "%"), dst.replace("%%", "%")
            out.append((src, dst))
    return out


def _caps(settings: dict[str, list[str]], key: str) -> list[str]:
    return [c.removeprefix("CAP_").lower() for v in settings.get(key, []) for c in v.split()]


def command(unit: Path, argv: list[str], python: str = sys.executable) -> list[str]:
    """The command line that runs argv as the unit would (run it as root); python: the interpreter that applies
    the system call filter before it execs argv (the one argv runs with, so that it is where the unit can
    reach it)."""
    s = service(unit)
    assert s.get("DynamicUser") == ["yes"] and s.get("NoNewPrivileges") == ["yes"]
    assert s.get("ProtectSystem") == ["strict"]
    ambient = _caps(s, "AmbientCapabilities")
    bounding = _caps(s, "CapabilityBoundingSet")
    umask = s.get("UMask", ["0022"])[0]
    setpriv = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
               "--inh-caps=-all" + "".join(f",+{c}" for c in ambient),
               "--ambient-caps=-all" + "".join(f",+{c}" for c in ambient),
               "--bounding-set=-all" + "".join(f",+{c}" for c in bounding),
               "--no-new-privs"]
    mdwe = "1" if s.get("MemoryDenyWriteExecute") == ["yes"] else "0"
    families = " ".join(v for v in s.get("RestrictAddressFamilies", []))
    allow = ",".join(sorted(allowed_syscalls(s)))
    inner = [*setpriv, python, "-c", Path(__file__).read_text(), "--allow", allow, "--mdwe", mdwe,
             "--families", families or "-", "--", *argv]
    binds = bind_paths(s)
    stage = "/run/ioscope-unit-binds"
    # in the new mount namespace, as root: the file systems as the unit sees them
    setup = [
        "set -e",
        "mount --make-rprivate /",
        # BindReadOnlyPaths: the sources as the host has them, before /tmp and /dev are replaced
        f"mkdir -p {stage}", f"mount -t tmpfs -o mode=700 tmpfs {stage}",
        *(f"mkdir {stage}/{i} && mount --rbind {shlex.quote(src)} {stage}/{i}" for i, (src, _) in enumerate(binds)),
        "mount -t tmpfs -o mode=1777 tmpfs /tmp",                     # PrivateTmp
        "mount -t tmpfs -o mode=1777 tmpfs /var/tmp",
        "mkdir -p /run/ioscope-unit-dev",
        "mount -t tmpfs -o mode=755 tmpfs /run/ioscope-unit-dev",     # PrivateDevices: a /dev of its own
        "for d in null zero full random urandom tty; do touch /run/ioscope-unit-dev/$d; "
        "mount --bind /dev/$d /run/ioscope-unit-dev/$d; done",
        "mkdir -p /run/ioscope-unit-dev/shm /run/ioscope-unit-dev/pts",
        "mount --move /run/ioscope-unit-dev /dev",
        # ProtectSystem=strict, ProtectHome=read-only, ProtectKernelTunables: everything read-only but
        # /dev, /proc (but /proc/sys) and the private /tmp
        "awk '{print $5}' /proc/self/mountinfo | sort -u | while read m; do case $m in "
        "/dev|/dev/*|/proc|/tmp|/var/tmp|/run/ioscope-unit-binds*) ;; "
        "*) mount -o remount,bind,ro \"$m\" 2>/dev/null || true;; esac; done",
        "mount -o remount,bind,ro /proc/sys 2>/dev/null || mount --bind -o ro /proc/sys /proc/sys",
        *(f"mkdir -p {shlex.quote(dst)} && mount --rbind {stage}/{i} {shlex.quote(dst)} && "
          f"mount -o remount,bind,ro {shlex.quote(dst)}" for i, (_, dst) in enumerate(binds)),
        f"umount -l {stage}",
        f"umask {umask}",
        "exec " + shlex.join(inner),
    ]
    return ["unshare", "--mount", "--", "sh", "-c", "\n".join(setup)]


def _apply_and_exec(argv: list[str]) -> None:
    allow = argv[argv.index("--allow") + 1].split(",")
    mdwe = argv[argv.index("--mdwe") + 1] == "1"
    families = argv[argv.index("--families") + 1].split()
    cmd = argv[argv.index("--") + 1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if mdwe and libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_MDWE")
    seccomp = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    seccomp.seccomp_init.restype = ctypes.c_void_p
    errno_eperm = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM): SystemCallErrorNumber=EPERM
    ctx = seccomp.seccomp_init(ctypes.c_uint32(errno_eperm))
    assert ctx
    for name in sorted(allow):
        nr = seccomp.seccomp_syscall_resolve_name(name.encode())
        if nr < 0 or (name == "socket" and families and families != ["-"]):
            continue
        if seccomp.seccomp_rule_add(ctypes.c_void_p(ctx), ctypes.c_uint32(SCMP_ACT_ALLOW), nr, 0) != 0:
            raise OSError("seccomp_rule_add " + name)
    if families and families != ["-"]:  # RestrictAddressFamilies: socket() for these families only

        class Cmp(ctypes.Structure):
            _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                        ("datum_b", ctypes.c_uint64)]

        nr = seccomp.seccomp_syscall_resolve_name(b"socket")
        for f in families:
            rc = seccomp.seccomp_rule_add_array(ctypes.c_void_p(ctx), ctypes.c_uint32(SCMP_ACT_ALLOW), nr, 1,
                                                ctypes.byref(Cmp(0, 4, FAMILIES[f], 0)))  # SCMP_CMP_EQ
            if rc != 0:
                raise OSError("seccomp_rule_add_array socket")
    if seccomp.seccomp_load(ctypes.c_void_p(ctx)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp_load")
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    _apply_and_exec(sys.argv)


__all__ = ["UID", "allowed_syscalls", "bind_paths", "command", "service"]
