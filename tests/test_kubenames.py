"""lib/ioscope/base/kubenames.py and its use in base.cgroups.label and the exporter's labels: Kubernetes
pod, namespace and container names from the files a kubelet, containerd and CRI-O leave on a host, built
here in tmp_path with their real layout (directories, symlinks, OCI specs). No root, no kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ioscope.base import cgroups, kubenames
from ioscope.base.errors import UsageError
from ioscope.base.kubenames import KubeName, KubeNames

UID = "8f0a7b3c-1d2e-4f5a-9b6c-7d8e9f0a1b2c"        # web.v2-0 in shop (containerd)
UID2 = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"       # coredns-5d78c9869d-x7k2p in kube-system (CRI-O)
UID3 = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"       # batch-2 in team-a (log directories only)
STATIC = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"           # a static pod's UID: a hash, no dashes
CID = "9b1d5e2f8a7c6b5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"   # web.v2-0's app
SID = "c0ffee00" * 8                                                      # web.v2-0's sandbox (pause)
SIDE = "5ca1ab1e" * 8                                                     # web.v2-0's log-shipper
CRIO = "deadbeef" * 8                                                     # coredns's coredns (CRI-O)
CRIO_SB = "feedface" * 8                                                  # coredns's sandbox (CRI-O)
BATCH = "0123abcd" * 8                                                    # batch-2's worker (symlink only)
ETCD = "e7cde7cd" * 8                                                     # etcd-node1's etcd (a static pod)
PODMAN = "abad1dea" * 8                                                   # a Podman container, no pod


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def oci_spec(annotations: dict[str, str], cgroups_path: str) -> dict[str, object]:
    """An OCI runtime spec as runc reads it from a bundle's config.json (the fields a runtime writes; the
    annotations are what ioscope reads)."""
    return {
        "ociVersion": "1.2.0",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["/bin/app"], "env": ["PATH=/usr/bin:/bin"], "cwd": "/",
                    "capabilities": {"bounding": ["CAP_CHOWN"]}, "oomScoreAdj": 1000},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec"]}],
        "annotations": annotations,
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}, "cgroupsPath": cgroups_path,
                  "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}]},
    }


def containerd_annotations(container: str, kind: str = "container") -> dict[str, str]:
    """internal/cri/annotations DefaultCRIAnnotations for a container (or the sandbox) of web.v2-0."""
    ann = {"io.kubernetes.cri.sandbox-id": SID, "io.kubernetes.cri.sandbox-namespace": "shop",
           "io.kubernetes.cri.sandbox-uid": UID, "io.kubernetes.cri.sandbox-name": "web.v2-0",
           "io.kubernetes.cri.container-type": kind}
    if kind == "container":
        ann |= {"io.kubernetes.cri.container-name": container, "io.kubernetes.cri.image-name": "docker.io/x/app:1"}
    else:
        ann |= {"io.kubernetes.cri.sandbox-log-directory": f"/var/log/pods/shop_web.v2-0_{UID}"}
    return ann


def crio_annotations(container: str, kind: str = "container") -> dict[str, str]:
    """What CRI-O writes for coredns's containers: its own keys and the kubelet's labels as annotations."""
    return {"io.kubernetes.cri-o.ContainerType": kind, "io.kubernetes.cri-o.SandboxID": CRIO_SB,
            "io.kubernetes.cri-o.Labels": json.dumps({"io.kubernetes.pod.name": "coredns-5d78c9869d-x7k2p"}),
            "io.kubernetes.pod.name": "coredns-5d78c9869d-x7k2p", "io.kubernetes.pod.namespace": "kube-system",
            "io.kubernetes.pod.uid": UID2, "io.kubernetes.container.name": container}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pod_logs(root: Path, ns: str, pod: str, uid: str, containers: dict[str, str]) -> None:
    """What the kubelet makes for a pod: var/log/pods/<ns>_<pod>_<uid>/<container>/0.log, and per
    container the symlink var/log/containers/<pod>_<ns>_<container>-<id>.log to it."""
    for name, cid in containers.items():
        log = root / kubenames.POD_LOGS / f"{ns}_{pod}_{uid}" / name / "0.log"
        write(log, '2026-01-01T00:00:00.000000000Z stdout F started\n')
        link = root / kubenames.CONTAINER_LOGS / f"{pod}_{ns}_{name}-{cid}.log"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(log, link.parent))


def containerd_bundle(root: Path, cid: str, ann: dict[str, str]) -> None:
    d = root / kubenames.CONTAINERD_TASKS / cid
    (d / "rootfs").mkdir(parents=True)
    write(d / "config.json", json.dumps(oci_spec(ann, f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice:"
                                                      f"cri-containerd:{cid}")))


def crio_container(root: Path, cid: str, ann: dict[str, str]) -> None:
    write(root / kubenames.CRIO_STORAGE / "overlay-containers" / cid / "userdata" / "config.json",
          json.dumps(oci_spec(ann, f"/kubepods/burstable/pod{UID2}/crio-{cid}")))


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A node with: web.v2-0 (containerd: sandbox, app, log-shipper; log directories and symlinks),
    coredns (CRI-O: sandbox and coredns; no log files), batch-2 (log directories and symlinks only: no
    runtime state readable), a static pod, a Podman container and a bundle whose spec is being written."""
    pod_logs(tmp_path, "shop", "web.v2-0", UID, {"app": CID, "log-shipper": SIDE})
    containerd_bundle(tmp_path, SID, containerd_annotations("", "sandbox"))
    containerd_bundle(tmp_path, CID, containerd_annotations("app"))
    containerd_bundle(tmp_path, SIDE, containerd_annotations("log-shipper"))
    crio_container(tmp_path, CRIO_SB, crio_annotations("POD", "sandbox"))
    crio_container(tmp_path, CRIO, crio_annotations("coredns"))
    crio_container(tmp_path, PODMAN, crio_annotations("x") | {"io.kubernetes.pod.name": ""})
    pod_logs(tmp_path, "team-a", "batch-2", UID3, {"worker": BATCH})
    pod_logs(tmp_path, "kube-system", "etcd-node1", STATIC, {"etcd": ETCD})
    # a bundle being made (spec not yet complete), one being deleted (containerd's atomicDelete), junk
    write(tmp_path / kubenames.CONTAINERD_TASKS / ("e" * 64) / "config.json", '{"ociVersion": "1.2.0", "annot')
    (tmp_path / kubenames.CONTAINERD_TASKS / ("." + "f" * 64)).mkdir()
    write(tmp_path / kubenames.CONTAINER_LOGS / "not-a-kubelet-link.log", "")
    (tmp_path / kubenames.POD_LOGS / UID3).mkdir()   # the kubelet's old layout (1.13 and before): a UID alone
    return tmp_path


def test_pods_and_containers_from_logs_and_both_runtimes(host: Path) -> None:
    k = KubeNames(host)
    assert k.lookup(UID, CID) == KubeName("shop", "web.v2-0", "app", UID)
    assert k.lookup(UID, SIDE) == KubeName("shop", "web.v2-0", "log-shipper", UID)
    assert k.lookup(UID, SID) == KubeName("shop", "web.v2-0", "", UID)            # the sandbox: the pod alone
    assert k.lookup(UID2, CRIO) == KubeName("kube-system", "coredns-5d78c9869d-x7k2p", "coredns", UID2)
    assert k.lookup(UID2, CRIO_SB) == KubeName("kube-system", "coredns-5d78c9869d-x7k2p", "", UID2)  # not "POD"
    assert k.lookup(UID3, BATCH) == KubeName("team-a", "batch-2", "worker", UID3)
    assert k.lookup(UID3) == KubeName("team-a", "batch-2", "", UID3)              # a pod's own cgroup
    assert k.lookup(STATIC) == KubeName("kube-system", "etcd-node1", "", STATIC)
    assert k.lookup("", PODMAN) == KubeName()
    assert k.lookup("", "e" * 64) == KubeName()                                   # being written: unknown
    assert k.lookup("00000000-0000-4000-8000-000000000000", "1" * 64) == KubeName()


def test_each_source_alone_names_the_container(host: Path) -> None:
    """The symlinks name a container without its runtime's state; the runtime's state names it without
    any log file (CRI-O's coredns above has none; here containerd's app loses its symlink and log)."""
    (host / kubenames.CONTAINER_LOGS / f"web.v2-0_shop_app-{CID}.log").unlink()
    for p in (host / kubenames.POD_LOGS).iterdir():
        if p.name.startswith("shop_"):
            for f in sorted(p.rglob("*"), key=lambda x: -len(x.parts)):
                f.unlink() if f.is_file() else f.rmdir()
            p.rmdir()
    k = KubeNames(host)
    assert k.lookup(UID, CID) == KubeName("shop", "web.v2-0", "app", UID)
    for b in (CID, SIDE, SID):
        (host / kubenames.CONTAINERD_TASKS / b / "config.json").unlink()
    k = KubeNames(host)
    assert k.lookup(UID, CID) == KubeName()
    assert k.lookup(UID3, BATCH) == KubeName("team-a", "batch-2", "worker", UID3)


def test_a_pod_that_goes_and_one_that_comes(host: Path) -> None:
    """Between refreshes web.v2-0 goes (its log directory, symlinks and bundles removed) and api-7 comes:
    after a miss the new pod is found within MIN_REFRESH_S, and the gone one forgotten within MAX_AGE_S,
    without a file of a known container read again."""
    clock = Clock()
    k = KubeNames(host, clock)
    assert k.lookup(UID, CID).pod == "web.v2-0"
    import shutil
    shutil.rmtree(host / kubenames.POD_LOGS / f"shop_web.v2-0_{UID}")
    for f in (host / kubenames.CONTAINER_LOGS).glob("web.v2-0_*"):
        f.unlink()
    for b in (CID, SIDE, SID):
        shutil.rmtree(host / kubenames.CONTAINERD_TASKS / b)
    new_uid, new_cid = "77777777-8888-4999-aaaa-bbbbbbbbbbbb", "a1" * 32
    pod_logs(host, "shop", "api-7", new_uid, {"api": new_cid})
    # a known container's spec made unreadable: a refresh must not read it again (it is cached)
    (host / kubenames.CRIO_STORAGE / "overlay-containers" / CRIO / "userdata" / "config.json").write_text("{")
    assert k.lookup(new_uid, new_cid) == KubeName()          # a miss, but refreshed less than 1 s ago
    clock.t += kubenames.MIN_REFRESH_S
    assert k.lookup(new_uid, new_cid) == KubeName("shop", "api-7", "api", new_uid)
    assert k.lookup(UID2, CRIO).container == "coredns"       # from the spec read before, not read again
    assert k.lookup(UID, CID) == KubeName()                  # the refresh dropped it


def test_gone_pods_are_forgotten_without_a_miss(host: Path) -> None:
    clock = Clock()
    k = KubeNames(host, clock)
    assert k.lookup(UID3, BATCH).pod == "batch-2"
    import shutil
    shutil.rmtree(host / kubenames.POD_LOGS / f"team-a_batch-2_{UID3}")
    (host / kubenames.CONTAINER_LOGS / f"batch-2_team-a_worker-{BATCH}.log").unlink()
    clock.t += kubenames.MAX_AGE_S - 0.5
    assert k.lookup(UID3, BATCH).pod == "batch-2"            # hits: no refresh yet
    clock.t += 0.5
    assert k.lookup(UID3, BATCH) == KubeName()


@pytest.mark.parametrize("name, want", [
    (f"shop_web.v2-0_{UID}", KubeName("shop", "web.v2-0", "", UID)),
    (f"a_b_{STATIC}", KubeName("a", "b", "", STATIC)),
    (f"kube-system_kube-proxy-x9z8q_{UID2}", KubeName("kube-system", "kube-proxy-x9z8q", "", UID2)),
    (UID, None),                                   # the old layout
    (f"shop_web_0_{UID}", None),                   # "_" in no name the API server accepts
    (f"Shop_web_{UID}", None),                     # nor capitals
    (f"shop.x_web_{UID}", None),                   # a namespace is a DNS label: no dots
    (f"shop_web_{UID}.tmp", None),
])
def test_pod_directory_names(name: str, want: KubeName | None) -> None:
    assert kubenames.parse_pod_dir(name) == want


@pytest.mark.parametrize("name, want", [
    (f"web.v2-0_shop_app-{CID}.log", (CID, KubeName("shop", "web.v2-0", "app"))),
    (f"web-0_shop_log-shipper-2-{CID}.log", (CID, KubeName("shop", "web-0", "log-shipper-2"))),
    (f"a_b_c-{CID}.log", (CID, KubeName("b", "a", "c"))),
    (f"web-0_shop_app-{CID[:40]}.log", None),      # cut at 255 bytes by the kubelet: the id is incomplete
    (f"web-0_shop_app-{CID}", None),
    (f"web-0_shop_app-{CID}.log.1", None),
    (f"web-0_shop_app_{CID}.log", None),
])
def test_container_symlink_names(name: str, want: tuple[str, KubeName] | None) -> None:
    assert kubenames.parse_container_link(name) == want


@pytest.mark.parametrize("text", ["", "{", "null", "[]", '{"annotations": []}', '{"annotations": {"io.kubernetes.'
                                  'cri.sandbox-name": 7, "io.kubernetes.cri.sandbox-namespace": "x"}}', "\xff\xfe"])
def test_malformed_specs_name_nothing(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text, errors="surrogateescape")
    got = kubenames.read_spec(tmp_path / "config.json")
    assert got is None or got == KubeName()
    assert kubenames.read_spec(tmp_path / "missing.json") is None
    (tmp_path / "dir.json").mkdir()
    assert kubenames.read_spec(tmp_path / "dir.json") is None


def test_a_host_root_that_is_not_there_names_nothing(tmp_path: Path) -> None:
    assert KubeNames(tmp_path / "nothing").lookup(UID, CID) == KubeName()
    write(tmp_path / "file", "")
    assert KubeNames(tmp_path / "file").lookup(UID, CID) == KubeName()
    (tmp_path / kubenames.POD_LOGS).parent.mkdir(parents=True)
    write(tmp_path / kubenames.POD_LOGS, "a file where a directory should be")
    assert KubeNames(tmp_path).lookup(UID) == KubeName()


CONTAINERD_PATH = (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/"
                   f"cri-containerd-{CID}.scope")


@pytest.mark.parametrize("path, want", [
    (CONTAINERD_PATH, f"{CONTAINERD_PATH} [kubernetes pod shop/web.v2-0, container app]"),
    (f"/kubepods/besteffort/pod{UID}/{SID}", f"/kubepods/besteffort/pod{UID}/{SID} [kubernetes pod "
                                            f"shop/web.v2-0, container {SID[:12]}]"),   # the sandbox: its id
    (f"/kubepods/burstable/pod{UID2}/crio-{CRIO}.scope", f"/kubepods/burstable/pod{UID2}/crio-{CRIO}.scope "
                                                        "[kubernetes pod kube-system/coredns-5d78c9869d-x7k2p, "
                                                        "container coredns]"),
    (f"/kubepods.slice/kubepods-pod{UID3.replace('-', '_')}.slice",
     f"/kubepods.slice/kubepods-pod{UID3.replace('-', '_')}.slice [kubernetes-pod team-a/batch-2]"),
    # unknown to the host: as before
    (f"/kubepods/pod00000000-0000-4000-8000-000000000000/{'1' * 64}",
     f"/kubepods/pod00000000-0000-4000-8000-000000000000/{'1' * 64} [kubernetes 111111111111, pod "
     "00000000-0000-4000-8000-000000000000]"),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice/cri-containerd-{ETCD}.scope",
     f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice/cri-containerd-{ETCD}.scope "
     "[kubernetes pod kube-system/etcd-node1, container etcd]"),   # a static pod
    (f"/system.slice/docker-{CID}.scope", f"/system.slice/docker-{CID}.scope [docker {CID[:12]}]"),
    ("/system.slice/nginx.service", "/system.slice/nginx.service"),
])
def test_label_names_pods_and_containers(host: Path, path: str, want: str) -> None:
    assert cgroups.label(path, KubeNames(host)) == want


def test_label_without_a_resolver_uses_the_host_root(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubenames, "_default", None)
    monkeypatch.setenv(kubenames.HOST_ROOT_ENV, str(host))
    assert cgroups.label(CONTAINERD_PATH).endswith("[kubernetes pod shop/web.v2-0, container app]")
    n = cgroups.named(cgroups.describe(CONTAINERD_PATH))
    assert (n.kind, n.name, n.pod, n.namespace, n.pod_name, n.container) == \
        ("kubernetes", CID[:12], UID, "shop", "web.v2-0", "app")
    assert cgroups.describe(CONTAINERD_PATH).pod_name == ""   # describe: the path alone, always


def test_exporter_labels(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ioscope.base import hist
    from ioscope.tools.exporter.model import Counter, Exposition, SeriesView
    from ioscope.tools.exporter.view import CGROUP_OTHER, families

    monkeypatch.setattr(kubenames, "_default", KubeNames(host))
    h = hist.Hist.from_values([20_000] * 3)
    unknown = f"/kubepods/pod00000000-0000-4000-8000-000000000000/{'1' * 64}"
    cgs = SeriesView({CONTAINERD_PATH: Counter(3, 12288, {"q2c": h}), unknown: Counter(1, 4096)}, Counter(2, 8192), 0)
    x = Exposition(hists=[], diskstats={}, unseen={}, processes=None, cgroups=cgs, losses={}, timing={})

    class Collect:
        def collect(self):  # type: ignore[no-untyped-def]
            return families(x)

    samples = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
               for f in text_string_to_metric_families(generate_latest(Collect()).decode())  # type: ignore[arg-type]
               for smp in f.samples}
    known = {"cgroup": CONTAINERD_PATH, "kind": "kubernetes", "name": CID[:12], "pod": UID, "namespace": "shop",
             "pod_name": "web.v2-0", "container": "app"}
    assert samples[("ioscope_cgroup_bytes_total", tuple(sorted(known.items())))] == 12288
    assert samples[("ioscope_cgroup_io_latency_seconds_count", tuple(sorted({**known, "phase": "q2c"}.items())))] == 3
    unknown_labels = {"cgroup": unknown, "kind": "kubernetes", "name": "111111111111",
                      "pod": "00000000-0000-4000-8000-000000000000", "namespace": "", "pod_name": "", "container": ""}
    assert samples[("ioscope_cgroup_bytes_total", tuple(sorted(unknown_labels.items())))] == 4096
    other = {k: "" for k in known} | {"cgroup": CGROUP_OTHER}
    assert samples[("ioscope_cgroup_bytes_total", tuple(sorted(other.items())))] == 8192


def test_a_bad_host_root_is_one_line(tmp_path: Path) -> None:
    """As a user runs it (a process of its own: cli.main() in this one would install the tools' signal
    handlers in the test runner)."""
    from conftest import run_ioscope

    with pytest.raises(UsageError, match="is not a directory"):
        kubenames.check_root(str(tmp_path / "nothing"), "--path.rootfs")
    p = run_ioscope("top", "-b", "-n", "1", env={kubenames.HOST_ROOT_ENV: str(tmp_path / "nothing")}, check=False)
    assert p.returncode != 0
    assert p.stderr == f"ioscope top: error: {kubenames.HOST_ROOT_ENV} '{tmp_path / 'nothing'}' is not a directory; " \
                       "give where the host's / is mounted, or leave it out\n", p.stderr
    p = run_ioscope("exporter", "--path.rootfs", str(tmp_path / "nothing"), check=False)
    assert p.returncode != 0
    assert p.stderr.startswith(f"ioscope exporter: error: --path.rootfs '{tmp_path / 'nothing'}' is not a directory"), \
        p.stderr
    assert p.stderr.count("\n") == 1
