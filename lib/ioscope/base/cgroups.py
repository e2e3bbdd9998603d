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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
# kubelet's pod cgroup: systemd driver (underscores in the UID), cgroupfs driver (dashes)
_POD_SLICE = re.compile(r"^(?:[a-z0-9]+-)*kubepods(?:-(?:burstable|besteffort))?-pod([0-9a-f_]{36})\.slice$")
_POD_DIR = re.compile(r"^pod([0-9a-f-]{36})$")
_UNIT = re.compile(r"^(.+)\.(service|scope|slice)$")
_NSPAWN = re.compile(r"^systemd-nspawn@(.+)\.service$")
_MACHINE = re.compile(r"^machine-(.+)\.scope$")
_UNIT_KIND = {"service": SERVICE, "scope": SCOPE, "slice": SLICE}
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True)
class CgroupName:
    """What a cgroup path names. kind: KINDS; id: the container's full id, the pod's UID, the systemd
    unit's name, else the path; name: what people type or see (docker ps's 12 hex digits, the unit
    name, the LXC container's name); pod: the pod's UID for a Kubernetes container, else ""."""

    kind: str
    id: str
    name: str
    pod: str = ""


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


__all__ = ["CGROUP", "CONTAINER", "CONTAINERD", "CRIO", "DOCKER", "KINDS", "KUBERNETES", "KUBERNETES_POD", "LXC",
           "MACHINE", "NSPAWN", "PODMAN", "ROOT", "SCOPE", "SERVICE", "SHORT_ID", "SLICE", "CgroupName", "describe",
           "unescape"]
