"""lib/ioscope/base/cgroups.py: the names people know for cgroup paths, on the path shapes that systemd,
Docker, Podman, containerd, CRI-O, kubelet (both cgroup drivers, also inside kind) and LXC make, as
/proc/PID/cgroup and the cgroup filesystem show them. No root, no kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ioscope.base import cgroups
from ioscope.base.cgroups import CgroupName, describe

DID = "3f4e9a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789ab"  # 64 hex digits, as runtimes make
CID = "9b1d5e2f8a7c6b5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"
UID = "8f0a7b3c-1d2e-4f5a-9b6c-7d8e9f0a1b2c"
STATIC = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"  # a static pod's UID: md5 of its manifest, 32 hex digits
UID_ = UID.replace("-", "_")  # the systemd driver's slice names write the pod's UID with underscores


@pytest.mark.parametrize("path, want", [
    ("/", CgroupName("root", "/", "/")),
    ("", CgroupName("root", "/", "/")),
    # systemd
    ("/system.slice/nginx.service", CgroupName("systemd-service", "nginx.service", "nginx.service")),
    ("/system.slice/system-getty.slice/getty@tty1.service",
     CgroupName("systemd-service", "getty@tty1.service", "getty@tty1.service")),
    ("/user.slice/user-1000.slice/session-3.scope", CgroupName("systemd-scope", "session-3.scope", "session-3.scope")),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-4242.scope",
     CgroupName("systemd-scope", "app-gnome-firefox-4242.scope", "app-gnome-firefox-4242.scope")),
    ("/user.slice/user-1000.slice", CgroupName("systemd-slice", "user-1000.slice", "user-1000.slice")),
    ("/init.scope", CgroupName("systemd-scope", "init.scope", "init.scope")),
    # machines: systemd-nspawn containers, and what systemd-machined registers (libvirt's VMs)
    (r"/machine.slice/machine-qemu\x2d1\x2dvm1.scope", CgroupName("machine", "machine-qemu-1-vm1.scope", "qemu-1-vm1")),
    ("/machine.slice/systemd-nspawn@box.service/payload", CgroupName("nspawn", "systemd-nspawn@box.service", "box")),
    ("/machine.slice/systemd-nspawn@box.service", CgroupName("nspawn", "systemd-nspawn@box.service", "box")),
    # Docker: systemd driver, cgroupfs driver (v1 blkio and v2 look alike)
    (f"/system.slice/docker-{DID}.scope", CgroupName("docker", DID, DID[:12])),
    (f"/docker/{DID}", CgroupName("docker", DID, DID[:12])),
    (f"/docker/{DID}/nested", CgroupName("docker", DID, DID[:12])),  # a group made inside the container
    # a service systemd runs inside a container is the container's I/O
    (f"/system.slice/docker-{DID}.scope/system.slice/cron.service", CgroupName("docker", DID, DID[:12])),
    # Podman: root (systemd), its cgroup v2 "container" child, rootless, cgroupfs; conmon is not the container
    (f"/machine.slice/libpod-{DID}.scope", CgroupName("podman", DID, DID[:12])),
    (f"/machine.slice/libpod-{DID}.scope/container", CgroupName("podman", DID, DID[:12])),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{DID}.scope",
     CgroupName("podman", DID, DID[:12])),
    (f"/libpod_parent/libpod-{DID}", CgroupName("podman", DID, DID[:12])),
    (f"/libpod_parent/{DID}", CgroupName("podman", DID, DID[:12])),
    (f"/machine.slice/libpod-conmon-{DID}.scope",
     CgroupName("systemd-scope", f"libpod-conmon-{DID}.scope", f"libpod-conmon-{DID}.scope")),
    # containerd alone (nerdctl) and a bare id whose runtime the path does not say
    (f"/system.slice/nerdctl-{DID}.scope", CgroupName("containerd", DID, DID[:12])),
    (f"/default/{DID}", CgroupName("container", DID, DID[:12])),
    (f"/ecs/0f1e2d3c4b5a/{DID}", CgroupName("container", DID, DID[:12])),
    # Kubernetes, systemd driver: QoS classes, containerd and CRI-O, Guaranteed pods without a QoS slice
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope",
     CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope",
     CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope",
     CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/docker-{CID}.scope", CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
     CgroupName("kubernetes-pod", UID, UID)),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{CID}.scope",
     CgroupName("kubernetes-pod", UID, UID)),  # CRI-O's monitor: the pod's, not a container's
    ("/kubepods.slice/kubepods-burstable.slice", CgroupName("systemd-slice", "kubepods-burstable.slice",
                                                            "kubepods-burstable.slice")),
    # Kubernetes, cgroupfs driver
    (f"/kubepods/burstable/pod{UID}/{CID}", CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods/besteffort/pod{UID}/{CID}", CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods/pod{UID}/{CID}", CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/kubepods/pod{UID}", CgroupName("kubernetes-pod", UID, UID)),
    # a static pod (etcd, the API server: a manifest file's pod): its UID an md5 in 32 hex digits
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC}.slice/cri-containerd-{CID}.scope",
     CgroupName("kubernetes", CID, CID[:12], STATIC)),
    (f"/kubepods/burstable/pod{STATIC}/{CID}", CgroupName("kubernetes", CID, CID[:12], STATIC)),
    (f"/kubepods.slice/kubepods-pod{STATIC}.slice", CgroupName("kubernetes-pod", STATIC, STATIC)),
    # kind / k3s in a container: the kubelet's own root, and runc's systemd driver without delegation
    ("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope",
     CgroupName("kubernetes", CID, CID[:12], UID)),
    (f"/system.slice/containerd.service/kubepods-burstable-pod{UID_}.slice:cri-containerd:{CID}",
     CgroupName("kubernetes", CID, CID[:12], UID)),
    # LXC: v1 (/lxc/NAME), v2 (lxc.payload.NAME); its monitor is not the container
    ("/lxc/web1", CgroupName("lxc", "web1", "web1")),
    ("/lxc.payload.web1", CgroupName("lxc", "web1", "web1")),
    ("/lxc.payload.web1/system.slice/nginx.service", CgroupName("lxc", "web1", "web1")),
    ("/lxc.monitor.web1", CgroupName("cgroup", "/lxc.monitor.web1", "lxc.monitor.web1")),
    # anything else: the path (what a test or an administrator made by hand)
    ("/ioscope-test/batch", CgroupName("cgroup", "/ioscope-test/batch", "batch")),
    ("/svc-batch/", CgroupName("cgroup", "/svc-batch", "svc-batch")),
])
def test_describe_real_world_paths(path: str, want: CgroupName) -> None:
    assert describe(path) == want
    assert want.kind in cgroups.KINDS


@pytest.mark.parametrize("path", [
    f"/docker/{DID[:63]}",                 # 63 digits: not an id
    f"/docker/{DID.upper()}",              # runtimes write ids in lower case
    f"/system.slice/docker-{DID}.service",  # not a scope
    f"/kubepods/burstable/pod{UID[:-1]}/x",  # a UID one digit short
    f"/kubepods/burstable/pod{STATIC[:-1]}/x",  # a static pod's one digit short
    f"/kubepods.slice/kubepods-pod{STATIC[:-1]}_.slice",
])
def test_near_misses_are_not_containers(path: str) -> None:
    assert describe(path).kind not in (cgroups.DOCKER, cgroups.KUBERNETES, cgroups.KUBERNETES_POD)


def test_unescape() -> None:
    assert cgroups.unescape(r"machine-qemu\x2d1\x2dvm.scope") == "machine-qemu-1-vm.scope"
    assert cgroups.unescape(r"a\x5cb") == "a\\b"
    assert cgroups.unescape("plain") == "plain"


def test_a_gone_cgroup_is_walked_for_once(tmp_path: Path) -> None:
    """CgroupNames names the ids of a hierarchy by walking it; an id the walk does not find (its cgroup
    removed before its I/O was named) is named cgroup:ID and not walked for again at each lookup (snoop
    names every line, the exporter and top every interval)."""
    from ioscope.base.cgroups import CgroupNames

    (tmp_path / "svc").mkdir()
    n = CgroupNames()
    n.root = tmp_path
    walks = 0
    walk = n.refresh

    def counted() -> None:
        nonlocal walks
        walks += 1
        walk()

    n.refresh = counted  # type: ignore[method-assign]
    assert n.name(os.stat(tmp_path / "svc").st_ino) == "/svc" and walks == 1
    gone = 2**40 + 7
    assert [n.name(gone) for _ in range(100)] == [f"cgroup:{gone}"] * 100 and walks == 2
