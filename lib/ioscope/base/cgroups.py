"""Names people know for a cgroup path: the container, pod or systemd unit a path belongs to.

describe() is a pure function of the path (a cgroup's path relative to its hierarchy's mount, "/" the
root, as agg's cgroup key and /proc/PID/cgroup give it). It reads the shapes the common managers make:

- systemd (any hierarchy it manages): `/system.slice/nginx.service`, `/user.slice/user-1000.slice/
  session-3.scope`, `/machine.slice/machine-vm1.scope`; unit names unescaped (`\\x2d` is `-`);
- Docker: `/docker/<id>` (cgroupfs driver), `/system.slice/docker-<id>.scope` (systemd driver);
- Podman: `/machine.slice/libpod-<id>.scope` (and its `/container` child on cgroup v2),
  `/libpod_parent/libpod-<id>`; its monitor `libpod-conmon-<id>.scope` is not the container;
- containerd: `cri-containerd-<id>.scope`, `nerdctl-<id>.scope`, and the `...slice:cri-containerd:<id>`
  form of a systemd-driven runc without delegation;
- CRI-O: `crio-<id>.scope` (its monitor `crio-conmon-<id>.scope` is not the container);
- Kubernetes (kubelet, either cgroup driver): `/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`, `/kubepods/besteffort/pod<uid>/<id>`,
  `/kubepods/pod<uid>/<id>` (Guaranteed), also under a kubelet's own root (kind: `/kubelet.slice/
  kubelet-kubepods.slice/...`); the pod's UID is given with dashes, as the API server writes it;
- LXC: `/lxc/<name>`, `/lxc.payload.<name>` (its monitor `/lxc.monitor.<name>` is not the container);
- systemd-nspawn: `/machine.slice/systemd-nspawn@<name>.service` (kind nspawn); a machine systemd-machined
  registered (libvirt's VMs, older nspawn): `/machine.slice/machine-<name>.scope` (kind machine);
- a bare 64-hex-digit id under any other parent (containerd's `/<namespace>/<id>`, ECS's
  `/ecs/<task>/<id>`): a container whose runtime the path does not say (kind `container`).

The deepest container in a path names it (a service that systemd runs inside a container is that
container's I/O); without one, the deepest systemd unit; without one, the path itself.

named() adds what the host knows of a Kubernetes pod and container (base.kubenames: the kubelet's log
directories, the runtimes' specs): the pod's namespace and name and the container's name; label() shows
them, `[kubernetes pod shop/web-0, container app]`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ioscope.base import kubenames
from ioscope.base.errors import UsageError

# kinds, most specific first in describe()'s search
KUBERNETES = "kubernetes"          # a container of a pod: id the container's, pod the pod's UID
KUBERNETES_POD = "kubernetes-pod"  # a pod's own cgroup (its containers are below it)
DOCKER, PODMAN, CONTAINERD, CRIO, LXC = "docker", "podman", "containerd", "cri-o", "lxc"
CONTAINER = "container"            # a bare container id under a parent that does not say which runtime
NSPAWN, MACHINE = "nspawn", "machine"   # systemd-nspawn containers; machines systemd-machined knows (VMs)
SERVICE, SCOPE, SLICE = "systemd-service", "systemd-scope", "systemd-slice"
ROOT, CGROUP = "root", "cgroup"
KINDS = (KUBERNETES, KUBERNETES_POD, DOCKER, PODMAN, CONTAINERD, CRIO, CONTAINER, LXC, NSPAWN, MACHINE, SERVICE,
         SCOPE, SLICE, ROOT, CGROUP)

SHORT_ID = 12  # hex digits of a container id people see (docker ps, crictl ps, podman ps)

_HEX64 = r"[0-9a-f]{64}"
# a container id in the last component: (regex, runtime); a scope's suffix is optional (cgroupfs drivers)
_CONTAINER = [
    (re.compile(rf"^docker-({_HEX64})\.scope$"), DOCKER),
    (re.compile(rf"^libpod-({_HEX64})(?:\.scope)?$"), PODMAN),
    (re.compile(rf"^cri-containerd-({_HEX64})\.scope$"), CONTAINERD),
    (re.compile(rf"^nerdctl-({_HEX64})\.scope$"), CONTAINERD),
    (re.compile(rf"^crio-({_HEX64})(?:\.scope)?$"), CRIO),
    # runc's systemd driver without delegation (kind, k3s in a container): "parent.slice:prefix:id"
    (re.compile(rf"^[^:/]*\.slice:cri-containerd:({_HEX64})$"), CONTAINERD),
    (re.compile(rf"^[^:/]*\.slice:crio:({_HEX64})$"), CRIO),
    (re.compile(rf"^[^:/]*\.slice:docker:({_HEX64})$"), DOCKER),
]
_BARE_ID = re.compile(rf"^({_HEX64})$")  # cgroupfs drivers: /docker/<id>, /kubepods/.../<id>, /<ns>/<id>
_MONITOR = re.compile(rf"^(?:libpod-conmon|crio-conmon)-{_HEX64}(?:\.scope)?$")
# kubelet's pod cgroup: systemd driver (underscores in the UID), cgroupfs driver (dashes); a static pod's UID
# (from a manifest file) is an md5 of it in 32 hex digits, no dashes (kubernetes pkg/kubelet/config/common.go,
# applyDefaults): etcd's, the API server's
_POD_SLICE = re.compile(r"^(?:[a-z0-9]+-)*kubepods(?:-(?:burstable|besteffort))?-pod([0-9a-f_]{36}|[0-9a-f]{32})"
                        r"\.slice$")
_POD_DIR = re.compile(r"^pod([0-9a-f-]{36}|[0-9a-f]{32})$")
_UNIT = re.compile(r"^(.+)\.(service|scope|slice)$")
_NSPAWN = re.compile(r"^systemd-nspawn@(.+)\.service$")
_MACHINE = re.compile(r"^machine-(.+)\.scope$")
_UNIT_KIND = {"service": SERVICE, "scope": SCOPE, "slice": SLICE}
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True)
class CgroupName:
    """What a cgroup path names. kind: KINDS; id: the container's full id, the pod's UID, the systemd
    unit's name, else the path; name: what people type or see (docker ps's 12 hex digits, the unit
    name, the LXC container's name); pod: the pod's UID for a Kubernetes container, else "". named() adds,
    where the host has them, the pod's namespace and name (pod_name) and the container's name (container)
    of a Kubernetes container or pod; describe() never does (a function of the path alone)."""

    kind: str
    id: str
    name: str
    pod: str = ""
    namespace: str = ""
    pod_name: str = ""
    container: str = ""


def unescape(unit: str) -> str:
    """systemd's unit-name escaping undone: 'machine-qemu\\x2d1\\x2dvm.scope' -> 'machine-qemu-1-vm.scope'."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), unit)


def _container(part: str, parent: str) -> tuple[str, str] | None:
    """(runtime, id) when this path component is a container's cgroup."""
    for rx, runtime in _CONTAINER:
        m = rx.match(part)
        if m:
            return runtime, m.group(1)
    m = _BARE_ID.match(part)
    if m:  # a bare id (cgroupfs drivers): the runtime from its parent where the parent says it
        return {"docker": DOCKER, "libpod_parent": PODMAN}.get(parent, CONTAINER), m.group(1)
    return None


def _pod(part: str) -> str | None:
    part = part.split(":", 1)[0]  # "kubepods-...-pod<uid>.slice:cri-containerd:<id>": the pod's slice first
    m = _POD_SLICE.match(part) or _POD_DIR.match(part)
    return m.group(1).replace("_", "-") if m else None


def _lxc(parts: list[str], i: int) -> str | None:
    part = parts[i]
    if part.startswith("lxc.payload."):
        return part[len("lxc.payload."):]
    if i > 0 and parts[i - 1] == "lxc" and not part.startswith("lxc.monitor"):
        return part
    return None


def describe(path: str) -> CgroupName:
    """A cgroup path -> the container, pod or unit it belongs to (see the module's doc)."""
    p = "/" + path.strip("/")
    if p == "/":
        return CgroupName(ROOT, "/", "/")
    parts = p.strip("/").split("/")
    pod = next((uid for uid in map(_pod, reversed(parts)) if uid is not None), "")
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if _MONITOR.match(part):
            break  # a runtime's monitor (conmon): not the container, and nothing above it is
        c = _container(part, parts[i - 1] if i else "")
        if c is not None:
            runtime, cid = c
            if pod:
                return CgroupName(KUBERNETES, cid, cid[:SHORT_ID], pod)
            return CgroupName(runtime, cid, cid[:SHORT_ID])
        name = _lxc(parts, i)
        if name is not None:
            return CgroupName(LXC, name, name)
        m = _NSPAWN.match(part) or (_MACHINE.match(part) if i and parts[i - 1] == "machine.slice" else None)
        if m:
            name = unescape(m.group(1))
            return CgroupName(NSPAWN if part.startswith("systemd-nspawn@") else MACHINE, unescape(part), name)
    for part in reversed(parts):
        uid = _pod(part)
        if uid is not None:
            return CgroupName(KUBERNETES_POD, uid, uid)
    for part in reversed(parts):
        m = _UNIT.match(part)
        if m and ":" not in part:
            unit = unescape(part)
            return CgroupName(_UNIT_KIND[m.group(2)], unit, unit)
    return CgroupName(CGROUP, p, unescape(parts[-1]))



# ---------------------------------------------------------------------------------------------------
# The hierarchy block I/O is charged in, and a cgroup's id there (what the BPF objects read from a bio's
# blkg: bpf/cgroup.bpf.h)


def _mount_fields(mounts: str) -> list[list[str]]:
    try:
        return [line.split() for line in Path(mounts).read_text().splitlines()]
    except OSError:
        return []


def cgroup2_root(mounts: str = "/proc/self/mounts") -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1)."""
    return next((Path(f[1]) for f in _mount_fields(mounts) if len(f) > 2 and f[2] == "cgroup2"), None)


def memory_cgroup_root(mounts: str = "/proc/self/mounts") -> Path | None:
    """The memory controller's hierarchy: v1's own mount, else the v2 mount when it has the controller."""
    fields = _mount_fields(mounts)
    for f in fields:
        if len(f) > 3 and f[2] == "cgroup" and "memory" in f[3].split(","):
            return Path(f[1])
    root = cgroup2_root(mounts)
    try:
        if root is not None and "memory" in (root / "cgroup.controllers").read_text().split():
            return root
    except OSError:
        pass
    return None


def io_cgroup_root(mounts: str = "/proc/self/mounts") -> tuple[Path, str] | None:
    """The hierarchy the io controller is on, where the BPF objects' cgroup ids come from (the bio's
    blkg): (its mount, "v1 blkio") when a cgroup v1 hierarchy carries blkio, else (the v2 mount, "v2")."""
    for f in _mount_fields(mounts):
        if len(f) > 3 and f[2] == "cgroup" and "blkio" in f[3].split(","):
            return Path(f[1]), "v1 blkio"
    root = cgroup2_root(mounts)
    return (root, "v2") if root is not None else None


@dataclass(frozen=True)
class CgroupFilter:
    """-c CGROUP, resolved: the cgroup's id (its directory's inode number, the kernel's kernfs id), its
    depth below the hierarchy's root (the kernel's cgroup->level: '/' is 0, '/a/b' is 2), its path
    relative to the mount, and which hierarchy ("v1 blkio" or "v2"). The BPF objects keep the I/O
    charged to it or to any cgroup under it (bpf/cgroup.bpf.h: cgroup_wanted)."""

    id: int
    level: int
    path: str
    hierarchy: str

    def bpf_globals(self) -> dict[str, tuple[int, str]]:
        """The objects' read-only globals for the filter: name -> (value, struct format)."""
        return {"targ_cgroup": (self.id, "Q"), "targ_cgroup_level": (self.level, "I")}

    def label(self) -> str:
        return f"{self.path} and below ({self.hierarchy})"


def cgroup_filter(path: str) -> CgroupFilter:
    """A cgroup path ('/system.slice/x.service', or a full path under the mount) of the io controller's
    hierarchy (io_cgroup_root) -> its CgroupFilter. A one-line error when it is not there."""
    io = io_cgroup_root()
    if io is None:
        raise UsageError("no cgroup hierarchy with the io (blkio) controller is mounted",
                         "mount cgroup v2 with the io controller enabled, or v1 blkio")
    root = io[0]
    p = Path(path)
    full = p if p.is_absolute() and str(p).startswith(str(root) + "/") else root / str(p).lstrip("/")
    try:
        full = full.resolve()
        ino = os.stat(full).st_ino
    except OSError:
        raise UsageError(f"cgroup '{path}' does not exist (looked for {full}: the {io[1]} hierarchy, "
                         "where the io controller is)", "give a path as in /proc/PID/cgroup") from None
    rel = os.path.relpath(full, root)
    if rel.startswith(".."):
        raise UsageError(f"cgroup '{path}' is outside the {io[1]} hierarchy ({root})",
                         "give a path relative to its mount")
    rel_path = "/" if rel == "." else "/" + rel
    return CgroupFilter(ino, 0 if rel == "." else len(rel.split("/")), rel_path, io[1])


def cgroup_id(path: str) -> int:
    """A cgroup path of the io controller's hierarchy -> its id (see cgroup_filter)."""
    return cgroup_filter(path).id


def within(path: str, top: str) -> bool:
    """Whether cgroup path is top or one under it ('/' holds every cgroup): -c's rule where the filter
    runs in user space."""
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


PF_EXITING = 0x4   # include/linux/sched.h: the task is exiting (/proc/PID/stat's flags)


def process_cgroup(pid: int, hierarchy: str, proc_root: str = "/proc") -> str | None:
    """A process's cgroup in the io controller's hierarchy (io_cgroup_root's "v1 blkio" or "v2"), from
    /proc/PID/cgroup; None when the process is gone, exiting, or in neither. An exiting process has left
    its cgroups (cgroup_exit, before it is a zombie): /proc then says '/' for it, which would be wrong;
    its state is read after its cgroup, so a cgroup read before it began exiting is kept."""
    try:
        lines = Path(proc_root, str(pid), "cgroup").read_text().splitlines()
        stat = Path(proc_root, str(pid), "stat").read_text()
    except OSError:
        return None
    after = stat[stat.rfind(")") + 2:].split()
    if len(after) < 7 or after[0] in ("Z", "X", "x") or int(after[6]) & PF_EXITING:
        return None
    for line in lines:
        hid, ctrls, path = [*line.split(":", 2), "", ""][:3]
        if (hierarchy == "v1 blkio" and "blkio" in ctrls.split(",")) or (hierarchy == "v2" and hid == "0"):
            return path or "/"
    return None


GONE = "[exited]"   # a process that exited before its cgroup was read


class ProcessCgroups:
    """pid -> its cgroup (process_cgroup), for tools whose rows are processes (fair, readsize): read at
    each lookup while the process lives, the last one read once it has exited, and for one that exited
    before any read the cgroup the kernel saw it in (an id, named by CgroupNames). top: -c's cgroup path."""

    def __init__(self, top: str | None = None) -> None:
        io = io_cgroup_root()
        self.hierarchy = io[1] if io else ""
        self.top = top
        self._last: dict[int, str] = {}
        self._names: CgroupNames | None = None

    def path(self, pid: int, cgroup_id: int = 0) -> str:
        """cgroup_id: the cgroup the kernel saw the process in at its I/O (readsize's map), named when the
        process has exited before /proc could be read (a short-lived worker)."""
        got = process_cgroup(pid, self.hierarchy) if self.hierarchy else None
        if got is None and cgroup_id and pid not in self._last:
            if self._names is None:
                self._names = CgroupNames()
            name = self._names.name(cgroup_id)
            got = None if name.startswith("cgroup:") else name
        if got is not None:
            self._last[pid] = got
        return self._last.get(pid, GONE)

    def wanted(self, pid: int) -> bool:
        """-c: the process is in the cgroup or one under it (one that exited unseen is not); the path read
        last for it (this interval's, by path()), /proc read only for a pid not read yet."""
        if self.top is None:
            return True
        path = self._last.get(pid) or self.path(pid)
        return path != GONE and within(path, self.top)

    def forget(self, live: set[int]) -> None:
        """Keep only these pids' last cgroups (the map does not grow with every process that ever ran)."""
        self._last = {p: c for p, c in self._last.items() if p in live}


# the cgroup of a record with none: a flush request of the block layer's own has no bio, so no blkg
NO_CGROUP = "[none]"


class CgroupNames:
    """cgroup id -> path relative to the io controller's hierarchy ('/' for the root), by walking it.

    A walk keeps the cgroups that exist, and of those gone only the ones named since the walk before
    (their I/O may still be read): on a host where cgroups come and go (containers, pods) it does not
    grow without bound."""

    def __init__(self) -> None:
        io = io_cgroup_root()
        self.root = io[0] if io else None
        self.hierarchy = io[1] if io else ""
        self._names: dict[int, str] = {}
        self._used: set[int] = set()

    def refresh(self) -> None:
        if self.root is None:
            return
        found: dict[int, str] = {}
        for dirpath, _dirs, _files in os.walk(self.root):
            try:
                ino = os.stat(dirpath).st_ino
            except OSError:
                continue
            rel = "/" + os.path.relpath(dirpath, self.root)
            found[ino] = "/" if rel == "/." else rel
        self._names = {**{c: self._names[c] for c in self._used if c in self._names}, **found}
        self._used = set()

    def name(self, cg: int) -> str:
        if cg and cg not in self._names:
            self.refresh()
            # an id the walk does not find is gone (ids are never reused): named once, not walked for again
            # at each of its I/Os (snoop names every line)
            self._names.setdefault(cg, f"cgroup:{cg}")
        self._used.add(cg)
        return self._names.get(cg, f"cgroup:{cg}" if cg else "[unknown]")


def named(n: CgroupName, names: kubenames.KubeNames | None = None) -> CgroupName:
    """describe()'s answer with the namespace, pod name and container name of a Kubernetes container or pod
    where the host has them (names: a resolver; the process's, kubenames.default(), when None)."""
    if n.kind not in (KUBERNETES, KUBERNETES_POD):
        return n
    k = (names or kubenames.default()).lookup(n.pod or n.id, n.id if n.kind == KUBERNETES else "")
    return replace(n, namespace=k.namespace, pod_name=k.pod, container=k.container) if k.pod else n


def label(path: str, names: kubenames.KubeNames | None = None) -> str:
    """A cgroup path as a view shows it: the path, and the container, pod or machine it is, when it is
    one ('/system.slice/docker-0123…scope [docker 0123456789ab]'; a Kubernetes container whose pod the host
    knows '... [kubernetes pod shop/web-0, container app]', else its id and pod UID); units and plain paths
    as they are. names: as named()."""
    n = describe(path) if path.startswith("/") else None
    if n is None or n.kind in (ROOT, CGROUP, SERVICE, SCOPE, SLICE):
        return path
    n = named(n, names)
    if n.pod_name:
        pod = f"{n.namespace}/{n.pod_name}"
        return f"{path} [kubernetes-pod {pod}]" if n.kind == KUBERNETES_POD else \
            f"{path} [kubernetes pod {pod}, container {n.container or n.name}]"
    return f"{path} [{n.kind} {n.name}" + (f", pod {n.pod}" if n.pod else "") + "]"

__all__ = ["CGROUP", "CONTAINER", "CONTAINERD", "CRIO", "DOCKER", "KINDS", "KUBERNETES", "KUBERNETES_POD", "LXC",
           "MACHINE", "NSPAWN", "PODMAN", "ROOT", "SCOPE", "SERVICE", "SHORT_ID", "SLICE", "CgroupFilter", "CgroupName",
           "CgroupNames", "cgroup2_root", "cgroup_filter", "cgroup_id", "describe", "io_cgroup_root", "label",
           "named", "unescape"]
