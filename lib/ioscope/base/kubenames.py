"""Kubernetes names for what a cgroup path says (base.cgroups: a pod's UID, a container's id), from what
the kubelet and the container runtimes leave on the host; no API server, no kubelet or runtime socket.

The sources, each under a host root (`/`, or where the host's file system is mounted: a container of a
DaemonSet with hostPath mounts; IOSCOPE_HOST_ROOT, the exporter's --path.rootfs):

- the kubelet's pod log directories, `var/log/pods/<namespace>_<pod-name>_<pod-uid>/<container-name>/
  <restart>.log` (kubernetes pkg/kubelet/kuberuntime/helpers.go: BuildPodLogsDirectory joins namespace,
  name and UID with "_", BuildContainerLogsDirectory adds the container's name, buildContainerLogsPath
  "<restart>.log"): pod UID -> (namespace, name), one listing;
- the kubelet's legacy symlinks, `var/log/containers/<pod-name>_<namespace>_<container-name>-<container-id>
  .log` (pkg/kubelet/kuberuntime/legacy.go: legacyLogSymlink and logSymlink, with BuildPodFullName's
  "<name>_<namespace>"; a name longer than 251 bytes is cut, and with it the id: not used):
  container id -> (namespace, pod, container), one listing;
- containerd's task bundles, `run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json`
  (containerd core/runtime/v2/bundle.go: NewBundle writes the OCI spec there, state dir/namespace/id),
  whose OCI annotations the CRI plugin sets (internal/cri/annotations/annotations.go:
  DefaultCRIAnnotations: io.kubernetes.cri.container-type, -container-name, -sandbox-name,
  -sandbox-namespace, -sandbox-uid);
- CRI-O's containers, `run/containers/storage/<driver>-containers/<id>/userdata/config.json` (cri-o
  server/container_create.go saves the spec in the container's run directory; containers/storage names
  it `<driver>-containers/<id>/userdata`), whose annotations carry the kubelet's labels
  (internal/factory/container/container.go adds every label as an annotation; the kubelet's labels, from
  pkg/kubelet/kuberuntime/labels.go newContainerLabels: io.kubernetes.pod.name, io.kubernetes.pod.namespace,
  io.kubernetes.pod.uid, io.kubernetes.container.name) and io.kubernetes.cri-o.ContainerType (cri-o
  pkg/annotations/internal.go).

A refresh lists these directories; a runtime's config.json is read once per container id it has not seen
(one file read per new container, none per I/O), and what is no longer listed is forgotten. Lookups refresh
at most every MIN_REFRESH_S seconds on a miss and every MAX_AGE_S seconds anyway, so a tool running for days
picks up new pods and drops gone ones. Unreadable directories and malformed files are skipped: a name is
then unknown, never an error.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ioscope.base.errors import UsageError

HOST_ROOT_ENV = "IOSCOPE_HOST_ROOT"
POD_LOGS = "var/log/pods"
CONTAINER_LOGS = "var/log/containers"
CONTAINERD_TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_STORAGE = "run/containers/storage"
MIN_REFRESH_S, MAX_AGE_S = 1.0, 10.0
MAX_CONFIG_BYTES = 4 << 20   # an OCI spec is a few KiB; a larger file is not one

# names as the API server validates them: a pod's name a DNS subdomain (dots and dashes), a namespace's
# and a container's a DNS label (dashes); never "_", which the kubelet's file names use as the separator
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_UID = r"[0-9a-f][-0-9a-f]{7,63}"   # API server's UUIDs (dashes); a static pod's, 32 hex digits
_POD_DIR = re.compile(rf"^({_LABEL})_({_SUBDOMAIN})_({_UID})$")
_CONTAINER_LINK = re.compile(rf"^({_SUBDOMAIN})_({_LABEL})_({_LABEL})-([0-9a-f]{{64}})\.log$")
_ID = re.compile(r"^[0-9a-f]{64}$")

# containerd's CRI annotations (internal/cri/annotations), CRI-O's copies of the kubelet's labels
CRI_TYPE, CRI_CONTAINER = "io.kubernetes.cri.container-type", "io.kubernetes.cri.container-name"
CRI_POD, CRI_NAMESPACE, CRI_UID = ("io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.sandbox-namespace",
                                   "io.kubernetes.cri.sandbox-uid")
CRIO_TYPE = "io.kubernetes.cri-o.ContainerType"
KUBE_CONTAINER, KUBE_POD, KUBE_NAMESPACE, KUBE_UID = ("io.kubernetes.container.name", "io.kubernetes.pod.name",
                                                      "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid")
SANDBOX = "sandbox"   # both runtimes' container type of a pod's sandbox (pause) container


@dataclass(frozen=True)
class KubeName:
    """What the host says of a pod or a container: "" where it says nothing."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    uid: str = ""


def parse_pod_dir(name: str) -> KubeName | None:
    """'shop_web-0_<uid>' (a directory of var/log/pods) -> its namespace, pod name and UID."""
    m = _POD_DIR.match(name)
    return KubeName(m.group(1), m.group(2), "", m.group(3)) if m else None


def parse_container_link(name: str) -> tuple[str, KubeName] | None:
    """'web-0_shop_app-<id>.log' (a symlink of var/log/containers) -> (container id, its names)."""
    m = _CONTAINER_LINK.match(name)
    return (m.group(4), KubeName(m.group(2), m.group(1), m.group(3))) if m else None


def parse_annotations(ann: Mapping[str, object]) -> KubeName | None:
    """An OCI spec's annotations (containerd's CRI plugin or CRI-O) -> the pod and container they name; a
    sandbox's names its pod alone; None when they name no pod."""
    def get(*keys: str) -> str:
        return next((v for k in keys if isinstance(v := ann.get(k), str) and v), "")

    pod, ns = get(CRI_POD, KUBE_POD), get(CRI_NAMESPACE, KUBE_NAMESPACE)
    if not pod or not ns:
        return None
    sandbox = get(CRI_TYPE, CRIO_TYPE) == SANDBOX
    return KubeName(ns, pod, "" if sandbox else get(CRI_CONTAINER, KUBE_CONTAINER), get(CRI_UID, KUBE_UID))


def read_spec(path: Path) -> KubeName | None:
    """A runtime's config.json (an OCI spec) -> parse_annotations of it, KubeName() for a spec that names no
    pod (a container of Podman's or nerdctl's); None when unreadable or not JSON (a spec being written)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(MAX_CONFIG_BYTES + 1))
    except (OSError, ValueError):
        return None
    ann = doc.get("annotations") if isinstance(doc, dict) else None
    return (parse_annotations(ann) if isinstance(ann, dict) else None) or KubeName()


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


class KubeNames:
    """Pod UIDs and container ids -> KubeName, from the host under root (the module's doc)."""

    def __init__(self, root: str | Path = "/", clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.clock = clock
        self._pods: dict[str, KubeName] = {}        # uid -> namespace, pod
        self._containers: dict[str, KubeName] = {}  # container id -> namespace, pod, container (uid if known)
        self._specs: dict[str, KubeName | None] = {}  # container id -> what its runtime's spec said (read once)
        self._at: float | None = None

    def refresh(self) -> None:
        self._at = self.clock()
        pods: dict[str, KubeName] = {}
        for d in _listdir(self.root / POD_LOGS):
            p = parse_pod_dir(d)
            if p is not None:
                pods[p.uid] = p
        containers: dict[str, KubeName] = {}
        specs: dict[str, KubeName | None] = {}
        dirs = [self.root / CONTAINERD_TASKS]
        dirs += [self.root / CRIO_STORAGE / d for d in _listdir(self.root / CRIO_STORAGE) if d.endswith("-containers")]
        for top in dirs:
            crio = top.name.endswith("-containers")
            for cid in _listdir(top):
                if not _ID.match(cid):
                    continue   # containerd's ".<id>" of a bundle being deleted, anything else
                got = self._specs.get(cid)
                if got is None:  # not read yet, or not readable then (a spec being written): read again
                    got = read_spec(top / cid / "userdata" / "config.json" if crio else top / cid / "config.json")
                specs[cid] = got
                if got is None or not got.pod:
                    continue
                if got.uid:
                    pods.setdefault(got.uid, KubeName(got.namespace, got.pod, "", got.uid))
                containers[cid] = got   # a sandbox's too (container ""): known, not looked for again
        for f in _listdir(self.root / CONTAINER_LOGS):
            c = parse_container_link(f)
            if c is not None:
                containers.setdefault(*c)
        self._pods, self._containers, self._specs = pods, containers, specs

    def _fresh(self, miss: bool) -> None:
        now = self.clock()
        if self._at is None or now - self._at >= MAX_AGE_S or (miss and now - self._at >= MIN_REFRESH_S):
            self.refresh()

    def lookup(self, uid: str = "", container_id: str = "") -> KubeName:
        """The names of a pod (its UID) and of one of its containers (its id), as far as the host says;
        KubeName() when it says nothing."""
        self._fresh(miss=False)
        c = self._containers.get(container_id) if container_id else None
        p = self._pods.get(uid) if uid else None
        if (container_id and c is None) or (uid and p is None):
            self._fresh(miss=True)
            c = self._containers.get(container_id) if container_id else None
            p = self._pods.get(uid) if uid else None
        if p is None and c is None:
            return KubeName()
        ns, pod = (p.namespace, p.pod) if p is not None else (c.namespace, c.pod) if c is not None else ("", "")
        return KubeName(ns, pod, c.container if c is not None else "", uid)


def check_root(root: str, what: str) -> Path:
    """A host root a user gave (what: the option or variable): a one-line error when it is not a readable
    directory."""
    p = Path(root)
    if not p.is_dir():
        raise UsageError(f"{what} '{root}' is not a directory", "give where the host's / is mounted, or leave it out")
    if not os.access(p, os.R_OK | os.X_OK):
        raise UsageError(f"{what} '{root}' cannot be read", "run as root, or give a readable directory")
    return p


_default: KubeNames | None = None


def default() -> KubeNames:
    """The process's resolver: under set_host_root()'s root, else IOSCOPE_HOST_ROOT's, else /."""
    global _default
    if _default is None:
        _default = KubeNames(os.environ.get(HOST_ROOT_ENV) or "/")
    return _default


def set_host_root(root: str, what: str = HOST_ROOT_ENV) -> None:
    """Name pods and containers from the host under root from now on (checked: check_root)."""
    global _default
    _default = KubeNames(check_root(root, what))


def check_env() -> None:
    """IOSCOPE_HOST_ROOT, when set: a one-line error at start when it is not a readable directory."""
    root = os.environ.get(HOST_ROOT_ENV)
    if root:
        check_root(root, HOST_ROOT_ENV)


__all__ = ["CONTAINERD_TASKS", "CONTAINER_LOGS", "CRIO_STORAGE", "HOST_ROOT_ENV", "MAX_AGE_S", "MIN_REFRESH_S",
           "POD_LOGS", "KubeName", "KubeNames", "check_env", "check_root", "default", "parse_annotations",
           "parse_container_link", "parse_pod_dir", "read_spec", "set_host_root"]
