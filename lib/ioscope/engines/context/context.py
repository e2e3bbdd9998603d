"""The host's context, as a support engineer elsewhere needs it beside a capture (docs/collect.md).

snapshot() reads /proc, /sys and netlink into one JSON-able dict. Every item that cannot be read is
recorded as {"absent": "<why>"}, never fatal: a host without multipath, cgroup v2 or network
statistics still gets a bundle. proc_root and sys_root let tests read a prepared tree."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

QUEUE_FILES = ("scheduler", "nr_requests", "read_ahead_kb", "max_sectors_kb", "max_hw_sectors_kb", "rotational",
               "logical_block_size", "physical_block_size", "write_cache", "fua", "wbt_lat_usec", "nomerges",
               "rq_affinity", "add_random", "io_poll", "discard_max_bytes", "io_timeout")
# the device under a disk (sysfs device/): identity (model, firmware, serial: redactable as serials) and, for
# SCSI, the command timeout, error-handler timeout, queue depth and state; NVMe controllers' too
DEVICE_FILES = ("vendor", "model", "rev", "firmware_rev", "serial", "wwid", "state", "timeout", "eh_timeout",
                "queue_depth", "queue_type", "transport", "cntlid")
LSBLK_COLUMNS = ("NAME,KNAME,MAJ:MIN,TYPE,SIZE,RO,RM,ROTA,SCHED,RQ-SIZE,LOG-SEC,PHY-SEC,MIN-IO,OPT-IO,DISC-GRAN,"
                 "DISC-MAX,FSTYPE,FSVER,LABEL,UUID,PARTUUID,PARTLABEL,PTTYPE,PTUUID,MOUNTPOINT,MODEL,SERIAL,REV,"
                 "VENDOR,WWN,TRAN,HCTL,STATE,PKNAME")
KERNEL_LOG_LINES = 1000   # the kernel log's last lines, per snapshot
VM_FILES = ("dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes",
            "dirty_expire_centisecs", "dirty_writeback_centisecs", "swappiness", "vfs_cache_pressure")
V1_LIMITS = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device", "blkio.throttle.read_iops_device",
             "blkio.throttle.write_iops_device", "blkio.weight", "blkio.bfq.weight")
V2_LIMITS = ("io.max", "io.weight", "io.bfq.weight", "io.latency", "io.prio.class")
MAX_CGROUPS = 4096   # cgroups visited per hierarchy: a bound on the snapshot's size


def absent(why: str) -> dict[str, str]:
    return {"absent": why}


def _read(p: Path) -> str:
    return p.read_text().strip()


def _int(p: Path) -> int:
    return int(_read(p))


def _sectors(p: Path) -> int:
    return int(_read(p)) * 512


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), or {"absent": why} when what it reads is not there or not readable."""
    try:
        return fn(*args)
    except OSError as exc:
        return absent(f"{getattr(exc, 'filename', '') or ''}: {exc.strerror or exc}".lstrip(": "))
    except (ValueError, IndexError) as exc:
        return absent(f"unreadable: {exc}")


def kernel(proc: Path) -> dict[str, Any]:
    u = os.uname()
    return {"release": u.release, "version": u.version, "machine": u.machine, "hostname": u.nodename,
            "cmdline": _try(_read, proc / "cmdline"), "python": platform.python_version()}


def cpus_memory(proc: Path) -> dict[str, Any]:
    def models() -> list[str]:
        return sorted({ln.split(":", 1)[1].strip() for ln in _read(proc / "cpuinfo").splitlines()
                       if ln.startswith("model name")})

    def meminfo() -> dict[str, int]:
        out = {}
        for ln in _read(proc / "meminfo").splitlines():
            k, _, v = ln.partition(":")
            if k in ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "Dirty", "Writeback", "SwapTotal"):
                out[k + "_kB"] = int(v.split()[0])
        return out

    return {"ncpus": os.cpu_count(), "models": _try(models), "memory": _try(meminfo)}


def _queue(qdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in QUEUE_FILES:
        try:
            v = _read(qdir / name)
        except OSError:
            continue
        if name == "scheduler":
            cur = [w[1:-1] for w in v.split() if w.startswith("[")]
            out["scheduler"] = cur[0] if cur else v
            out["schedulers_available"] = [w.strip("[]") for w in v.split()]
        else:
            out[name] = int(v) if v.lstrip("-").isdigit() else v
    return out


def block_devices(sys: Path) -> dict[str, Any]:
    """Every whole disk as a tree: its queue settings, size, partitions, and the devices stacked on it
    (holders: dm, md) or below it (slaves), with dm's name and md's level where they exist."""
    out: dict[str, Any] = {}
    base = sys / "block"
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        dev: dict[str, Any] = {"dev": _try(_read, d / "dev"), "size_bytes": _try(_sectors, d / "size"),
                               "queue": _queue(d / "queue"), "removable": _try(_int, d / "removable")}
        parts = {}
        for p in sorted(d.iterdir()):
            if (p / "partition").exists():
                parts[p.name] = {"dev": _try(_read, p / "dev"), "start_sector": _try(_int, p / "start"),
                                 "size_bytes": _try(_sectors, p / "size")}
        dev["partitions"] = parts
        dev["slaves"] = sorted(x.name for x in (d / "slaves").iterdir()) if (d / "slaves").is_dir() else []
        dev["holders"] = sorted(x.name for x in (d / "holders").iterdir()) if (d / "holders").is_dir() else []
        if (d / "dm" / "name").exists():
            dev["dm"] = {"name": _try(_read, d / "dm" / "name"), "uuid": _try(_read, d / "dm" / "uuid")}
        if (d / "md" / "level").exists():
            dev["md"] = {"level": _try(_read, d / "md" / "level"), "raid_disks": _try(_int, d / "md" / "raid_disks")}
        if (d / "loop" / "backing_file").exists():
            dev["loop_backing_file"] = _try(_read, d / "loop" / "backing_file")
        ident = _device(d)
        if ident:
            dev["device"] = ident
        out[d.name] = dev
    return out


def _device(d: Path) -> dict[str, Any]:
    """What sysfs says of the device below a disk: the disk's own serial and wwid (virtio, NVMe
    namespaces), then device/ (SCSI: vendor, model, rev, timeouts, queue depth; NVMe: the controller's
    model, serial, firmware_rev)."""
    out: dict[str, Any] = {}
    for where in (d, d / "device"):
        for name in DEVICE_FILES:
            if name in out or (where == d and name not in ("serial", "wwid")):
                continue
            try:
                v = _read(where / name)
            except OSError:
                continue
            out[name] = int(v) if v.isdigit() and name in ("timeout", "eh_timeout", "queue_depth", "cntlid") else v
    return out


def _tool(argv: list[str], timeout: float = 20) -> Any:
    """A tool's standard output, or {"absent": why}: not installed, failed, timed out."""
    exe = shutil.which(argv[0], path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if exe is None:
        return absent(f"{argv[0]} is not installed")
    try:
        p = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        return absent(f"{' '.join(argv)} did not finish in {timeout:g} s")
    except OSError as exc:
        return absent(f"{' '.join(argv)}: {exc.strerror}")
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return absent(f"{' '.join(argv)} exited {p.returncode}" + (f": {err[0]}" if err else ""))
    return p.stdout


def _json_tool(argv: list[str]) -> Any:
    out = _tool(argv)
    if not isinstance(out, str):
        return out
    try:
        return json.loads(out) if out.strip() else {}
    except ValueError as exc:
        return absent(f"{' '.join(argv)} printed what is not JSON: {exc}")


def _lines(out: Any) -> Any:
    return out.splitlines() if isinstance(out, str) else out


def blkid() -> Any:
    """Every block device's signatures (UUID, TYPE, LABEL, PARTUUID, ...), probed afresh (no cache)."""
    out = _tool(["blkid", "-c", "/dev/null", "-o", "export"])
    if not isinstance(out, str):
        return out
    devs: dict[str, dict[str, str]] = {}
    cur: dict[str, str] = {}
    for ln in [*out.splitlines(), ""]:
        if not ln.strip():
            if "DEVNAME" in cur:
                devs[cur.pop("DEVNAME")] = cur
            cur = {}
            continue
        k, _, v = ln.partition("=")
        cur[k] = v
    return devs


def storage(proc: Path) -> dict[str, Any]:
    """The storage stack as the system's own tools show it, each only where it is installed."""
    nvme: Any = absent("nvme (nvme-cli) is not installed")
    if shutil.which("nvme", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        nvme = {"list": _json_tool(["nvme", "list", "-o", "json"])}
        for c in sorted(Path("/dev").glob("nvme[0-9]*")):
            if c.name[4:].isdigit():   # controllers, not namespaces
                nvme[f"smart-log {c.name}"] = _json_tool(["nvme", "smart-log", str(c), "-o", "json"])
    lvm: Any = absent("lvm (lvm2) is not installed")
    if shutil.which("lvm", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
        lvm = {w: _json_tool(["lvm", w, "--reportformat", "json", "-a", *(["-o", "+devices"] if w == "lvs" else [])])
               for w in ("pvs", "vgs", "lvs")}
    dm_table = _tool(["dmsetup", "table"])
    return {
        "lsblk": _json_tool(["lsblk", "-J", "-b", "-o", LSBLK_COLUMNS]),
        "blkid": blkid(),
        "fstab": _try(lambda: [ln for ln in _read(Path("/etc/fstab")).splitlines()
                               if ln.strip() and not ln.lstrip().startswith("#")]),
        "dm_tables": [] if dm_table == "No devices found\n" else _lines(dm_table),
        "dm_status": _lines(_tool(["dmsetup", "status"])) if isinstance(dm_table, str) else dm_table,
        "mdstat": _try(lambda: _read(proc / "mdstat").splitlines()),
        "lvm": lvm,
        "nvme": nvme,
    }


def kernel_log() -> Any:
    """The kernel log's last lines (I/O errors, timeouts, resets), ISO times: dmesg, else journalctl -k."""
    out = _tool(["dmesg", "--time-format", "iso"])
    if isinstance(out, str):
        return {"source": "dmesg", "lines": out.splitlines()[-KERNEL_LOG_LINES:]}
    j = _tool(["journalctl", "-k", "-o", "short-iso", "--no-pager", "-n", str(KERNEL_LOG_LINES)])
    if isinstance(j, str):
        return {"source": "journalctl -k", "lines": j.splitlines()}
    return absent(f"dmesg: {out['absent']}; journalctl: {j['absent']}")


def multipath() -> dict[str, Any]:
    exe = shutil.which("multipathd")
    if exe is None:
        return absent("multipathd is not installed (no multipath maps on this host)")
    p = subprocess.run([exe, "show", "paths", "raw", "format", "%d %D %t %T %s %P"], capture_output=True,
                       text=True, timeout=10)
    if p.returncode != 0:
        return absent(f"multipathd show paths failed: {p.stderr.strip() or p.stdout.strip()}")
    maps = subprocess.run([exe, "show", "maps", "raw", "format", "%n %d %w %P"], capture_output=True, text=True,
                          timeout=10)
    return {"paths": p.stdout.splitlines(), "maps": maps.stdout.splitlines()}


def diskstats(proc: Path) -> list[str]:
    return _read(proc / "diskstats").splitlines()


def mounts(proc: Path) -> list[dict[str, str]]:
    out = []
    for ln in _read(proc / "self" / "mountinfo").splitlines():
        left, _, right = ln.partition(" - ")
        lp, rp = left.split(), right.split()
        if len(lp) >= 6 and len(rp) >= 3:
            out.append({"dev": lp[2], "root": lp[3], "mount_point": lp[4].replace("\\040", " "), "options": lp[5],
                        "fstype": rp[0], "source": rp[1], "super_options": rp[2]})
    return out


def vm(proc: Path) -> dict[str, Any]:
    return {k: _try(_int, proc / "sys" / "vm" / k) for k in VM_FILES}


def pressure(proc: Path) -> Any:
    got = _try(_read, proc / "pressure" / "io")
    return got.splitlines() if isinstance(got, str) else got


def _limits(root: Path, files: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """cgroup path -> {file: content} for every cgroup under root with a non-default limit file."""
    out: dict[str, dict[str, str]] = {}
    seen = 0
    for dirpath, dirnames, _files in os.walk(root):
        seen += 1
        if seen > MAX_CGROUPS:
            out["..."] = {"truncated": f"more than {MAX_CGROUPS} cgroups: the rest not read"}
            break
        d = Path(dirpath)
        got = {}
        for f in files:
            try:
                v = _read(d / f)
            except OSError:
                continue
            if v and v not in ("default 100", "100", "0"):
                got[f] = v
        if got:
            out["/" + str(d.relative_to(root)).lstrip(".")] = got
        dirnames.sort()
    return out


def cgroups(proc: Path) -> dict[str, Any]:
    v1: Any = absent("no cgroup v1 blkio hierarchy mounted")
    v2: Any = absent("no cgroup v2 hierarchy mounted")
    for ln in _read(proc / "self" / "mounts").splitlines():
        parts = ln.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup2" and isinstance(v2, dict) and "absent" in v2:
            v2 = {"mount": parts[1], "limits": _try(_limits, Path(parts[1]), V2_LIMITS)}
        if parts[2] == "cgroup" and "blkio" in parts[3].split(","):
            v1 = {"mount": parts[1], "limits": _try(_limits, Path(parts[1]), V1_LIMITS)}
    return {"v1_blkio": v1, "v2_io": v2}


def network(sys: Path) -> Any:
    """Interfaces through netlink (pyroute2): links with MTU, state, address, statistics; addresses;
    the link speed from sysfs where the driver gives one."""
    try:
        from pyroute2 import IPRoute  # type: ignore[import-untyped]

        from ioscope.engines.netlink.collector import link_speed  # nic's reading of the link speed (sysfs)
    except ImportError as exc:
        return absent(f"pyroute2 cannot be imported: {exc}")
    out: dict[str, Any] = {}
    with IPRoute() as ip:
        addrs: dict[int, list[str]] = {}
        for a in ip.get_addr():
            addrs.setdefault(a["index"], []).append(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}")
        for link in ip.get_links():
            name = link.get_attr("IFLA_IFNAME")
            stats = link.get_attr("IFLA_STATS64") or {}
            speed = link_speed(name, sys / "class" / "net")
            info: Any = link.get_attr("IFLA_LINKINFO")
            out[name] = {"index": link["index"], "mtu": link.get_attr("IFLA_MTU"),
                         "state": link.get_attr("IFLA_OPERSTATE"), "mac": link.get_attr("IFLA_ADDRESS"),
                         "kind": info.get_attr("IFLA_INFO_KIND") if info else None,
                         "speed_mbps": speed if speed is not None else absent("speed unknown"),
                         "addresses": addrs.get(link["index"], []),
                         "stats": {k: int(v) for k, v in dict(stats).items()}}
    return out


def snapshot(command: str, proc_root: str = "/proc", sys_root: str = "/sys") -> dict[str, Any]:
    from ioscope import __version__

    proc, sys = Path(proc_root), Path(sys_root)
    return {
        "ioscope": {"version": __version__, "command": command},
        "kernel": kernel(proc),
        "cpus_memory": cpus_memory(proc),
        "block_devices": _try(block_devices, sys),
        "multipath": _try(multipath),
        "storage": storage(proc),
        "kernel_log": kernel_log(),
        "diskstats": _try(diskstats, proc),
        "mounts": _try(mounts, proc),
        "vm": vm(proc),
        "pressure_io": pressure(proc),
        "cgroups": _try(cgroups, proc),
        "network": _try(network, sys),
    }
