"""Acceptance: a support engineer's `ioscope collect` on a customer's host, and the reading of the bundle
elsewhere, played as typed.

The host: a loop disk with a partition table and ext4 on partition 1, mounted on a directory whose name
is a secret; a cgroup v1 blkio read limit on the disk (a test cgroup); a veth pair whose peer lives in a
network namespace made by the test. The workload: a process named `acme-writer` (dd under another name)
writes and reads files. `ioscope collect -o CASE -d DISK` runs around it and is stopped with Ctrl-C;
then `collect --list`, `report`, `parse`, `export` (blktrace and parquet), `agg -r`, `diff`, `sql` and
`fleet` open the bundle directly.
Again with `--redact hostnames,comms,paths`: no byte of the bundle (decompressed, the capture
included) holds the host name, the process name or the mount path, and the host's pseudonym is the
same in the capture and in the context. Bad input: a cut bundle, a bundle without a capture, an
unknown redaction class.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_counted, ioscope_cmd, run_ioscope, unreported_completions

NWRITES = 53   # direct 4 KiB writes by acme-writer: a prime
SECRET = "acme-secret-mnt"


def _members(path: str) -> dict[str, bytes]:
    import pyarrow as pa
    with tarfile.open(fileobj=pa.CompressedInputStream(pa.OSFile(path), "zstd"), mode="r|") as t:
        return {m.name: t.extractfile(m).read() for m in t if m.isfile()}  # type: ignore[union-attr]


@pytest.fixture
def host(live: None, tmp_path: Path) -> Iterator[dict[str, Any]]:
    from pyroute2 import IPRoute, netns  # type: ignore[import-untyped]

    from ioscope.base.testbed import LoopDevice
    ns = f"ioscope-coll-{os.getpid()}"
    veth = f"ioscv{os.getpid() % 100000}"
    mnt = tempfile.mkdtemp(prefix=SECRET + "-")
    cg = Path(f"/sys/fs/cgroup/blkio/ioscope-collect-{os.getpid()}")
    mounted = False
    with LoopDevice(size_mb=96, partitions_mb=[80]) as ld:
        netns.create(ns)
        try:
            with IPRoute() as ip:
                ip.link("add", ifname=veth, kind="veth", peer={"ifname": "peer0", "net_ns_fd": ns})
            p1 = ld.partition(1)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", p1], check=True)
            subprocess.run(["mount", "-o", "noatime", p1, mnt], check=True)
            mounted = True
            cg.mkdir()
            limit = f"{ld.device.major}:{ld.device.minor} 10485760"
            (cg / "blkio.throttle.read_bps_device").write_text(limit)
            writer = tmp_path / "acme-writer"
            writer.symlink_to("/bin/dd")
            yield {"disk": ld, "mnt": mnt, "veth": veth, "cgroup": "/" + cg.name, "limit": limit,
                   "writer": str(writer), "part": Path(p1).name}
        finally:
            if mounted:
                subprocess.run(["umount", mnt], check=False)
            os.rmdir(mnt)
            if cg.exists():
                cg.rmdir()
            with IPRoute() as ip:
                idx = ip.link_lookup(ifname=veth)
                if idx:
                    ip.link("del", index=idx[0])
            netns.remove(ns)


def _collect(h: dict[str, Any], out: str, *extra: str, hostname: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ioscope_cmd("collect", "-o", out, "-d", h["disk"].name, *extra)
    if hostname:  # the customer's host, in a UTS namespace of its own (this machine's name is "vm")
        cmd = ["unshare", "--uts", "--", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *cmd]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stderr is not None
        first = p.stderr.readline()
        assert first.startswith("Recording block I/O events"), first + p.stderr.read()
        d0 = h["disk"].diskstats()
        subprocess.run([h["writer"], "if=/dev/zero", f"of={h['mnt']}/f", "bs=4k", f"count={NWRITES}",
                        "oflag=direct"], check=True, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        h["k"] = {"writes": h["disk"].diskstats().writes - d0.writes}
    finally:
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, "", first + err)


def _missing(h: dict[str, Any], bundle: str) -> int:
    """The disk's completions that ran no BPF program while the bundle's capture was recorded, as its
    completions check reports them (0: every completion is in it)."""
    dev = h["disk"].device
    return unreported_completions(bundle, dev.major, dev.minor)


def test_bundle_holds_capture_and_context_and_every_reader_opens_it(host: dict[str, Any], tmp_path: Path) -> None:
    h, case = host, str(tmp_path / "case.ioscope")
    r = _collect(h, case)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"Collected {case} ("), r.stderr
    assert os.stat(case).st_mode & 0o777 == 0o600
    m = _members(case)
    assert list(m) == ["manifest.json", "context-start.json", "capture.ioscope", "context-end.json"]
    ctx = json.loads(m["context-start.json"])
    disk = ctx["block_devices"][h["disk"].name]
    assert h["part"] in disk["partitions"] and disk["queue"]["scheduler"]
    assert any(x["mount_point"] == h["mnt"] and x["fstype"] == "ext4" for x in ctx["mounts"])
    assert ctx["cgroups"]["v1_blkio"]["limits"][h["cgroup"]] == {"blkio.throttle.read_bps_device": h["limit"]}
    assert ctx["network"]["lo"]["addresses"][0].startswith("127.0.0.1")
    assert ctx["network"][h["veth"]]["kind"] == "veth"
    assert ctx["multipath"] == {"absent": "multipathd is not installed (no multipath maps on this host)"}
    assert isinstance(json.loads(m["context-end.json"])["diskstats"], list)
    # the capture: acme-writer's writes, every one, as /proc/diskstats counted them (agg counts the I/Os
    # that completed: less the completions that ran no BPF program, as many as the capture reports)
    miss = _missing(h, case)
    agg = run_ioscope("agg", "-r", case, "-e", "count() by comm,op", "-j", timeout=120)
    assert agg.returncode == 0, agg.stderr
    rows = {(x["keys"]["comm"], x["keys"]["op"]): x["count"] for x in json.loads(agg.stdout)["aggs"][0]["rows"]}
    assert_counted(rows.get(("acme-writer", "write"), 0), NWRITES, miss)
    assert_counted(sum(n for (_c, op), n in rows.items() if op == "write"), h["k"]["writes"], miss)
    # every reader opens the bundle itself
    lst = run_ioscope("collect", "--list", case)
    assert lst.returncode == 0 and "capture.ioscope" in lst.stdout and "redacted: nothing" in lst.stdout, lst
    for cmd in (["report", case], ["parse", case], ["export", "-o", str(tmp_path / "x.bin"), case],
                ["export", "--format", "parquet", "-o", str(tmp_path / "pq"), case], ["diff", case, case],
                ["sql", "select count(*) as n from ios", case], ["fleet", case]):
        p = run_ioscope(*cmd, timeout=120)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (cmd, p.stderr)
    assert "acme-writer" in run_ioscope("parse", case).stdout
    sql = run_ioscope("sql", "-j", "select count(*) as n from ios where comm = 'acme-writer' and op = 'write'", case)
    assert json.loads(sql.stdout) == {"n": NWRITES}, sql
    # cut in transfer: inside the capture, its complete chunks are still read (and it says so); before
    # the capture, one line
    data = Path(case).read_bytes()
    cut = tmp_path / "cut.ioscope"
    cut.write_bytes(data[: len(data) * 3 // 4])
    p = run_ioscope("report", str(cut), timeout=120)
    assert "Traceback" not in p.stderr and "cut short" in p.stdout + p.stderr, (p.returncode, p.stderr)
    cut.write_bytes(data[:100])
    p = run_ioscope("report", str(cut))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and "the bundle has no capture.ioscope" in lines[0], p
    lst = run_ioscope("collect", "--list", str(cut))
    assert lst.returncode == 1 and "Traceback" not in lst.stderr, lst


def test_redaction_leaves_no_name_behind(host: dict[str, Any], tmp_path: Path) -> None:
    h, case = host, str(tmp_path / "red.ioscope")
    hostname = "acme-prod-db7"
    r = _collect(h, case, "--redact", "hostnames,comms,paths", hostname=hostname)
    assert r.returncode == 0, r.stderr
    m = _members(case)
    for name, data in m.items():
        for secret in (hostname.encode(), b"acme-writer", h["mnt"].encode(), SECRET.encode()):
            assert secret not in data, (name, secret)
    meta_host = run_ioscope("report", "--json", case).stdout
    token = json.loads(m["context-start.json"])["kernel"]["hostname"]
    assert token.startswith("host-") and json.loads(meta_host)["capture"]["host"] == token
    agg = run_ioscope("agg", "-r", case, "-e", "count() by comm,op", "-j", timeout=120)
    rows = {(x["keys"]["comm"], x["keys"]["op"]): x["count"] for x in json.loads(agg.stdout)["aggs"][0]["rows"]}
    # the writer's completed writes: NWRITES, less at most the completions the capture reports missing
    miss = _missing(h, case)
    assert [n for (c, op), n in rows.items()
            if c.startswith("comm-") and NWRITES - miss <= n <= NWRITES and op == "write"], (rows, miss)
    assert "hostnames (" in run_ioscope("collect", "--list", case).stdout


def test_bad_bundles_and_options(live: None, tmp_path: Path) -> None:
    bad = run_ioscope("collect", "-o", str(tmp_path / "x"), "--redact", "hostnames,secrets")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "secrets" in bad.stderr, bad
    assert not (tmp_path / "x").exists()
    # a bundle without a capture
    import pyarrow as pa
    nocap = tmp_path / "nocap.ioscope"
    with open(nocap, "wb") as raw:
        z = pa.CompressedOutputStream(pa.PythonFile(raw, mode="w"), "zstd")
        with tarfile.open(fileobj=z, mode="w|") as t:
            data = b"{}"
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        z.close()
    p = run_ioscope("report", str(nocap))
    assert p.returncode == 1 and "has no capture.ioscope" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p


def test_diff_of_two_bundles_shows_the_limit_that_changed(host: dict[str, Any], tmp_path: Path) -> None:
    """The same workload collected twice, the cgroup's read limit raised in between: `ioscope diff`
    of the two bundles names the change (from the bundles' contexts) and the writes of each."""
    h = host
    one, two = str(tmp_path / "one.ioscope"), str(tmp_path / "two.ioscope")
    assert _collect(h, one).returncode == 0
    new = f"{h['disk'].device.major}:{h['disk'].device.minor} 20971520"
    Path(f"/sys/fs/cgroup/blkio{h['cgroup']}/blkio.throttle.read_bps_device").write_text(new)
    assert _collect(h, two).returncode == 0
    p = run_ioscope("diff", "-j", one, two, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    ch = {c["setting"]: (c["disk"], c["before"], c["after"]) for c in doc["changes"]}
    # a setting of the disk it limits, as report names it (iolimits.recorded)
    assert ch[f"throttle {h['cgroup']} (v1 blkio) read_bps"] == (h["disk"].name, 10485760, 20971520), ch
    (wr,) = [o for o in doc["ops"] if o["op"] == "write"]
    # completed writes: at least the workload's, less the completions each capture reports missing
    assert wr["metrics"]["I/Os"]["before"] >= NWRITES - _missing(h, one), wr
    assert wr["metrics"]["I/Os"]["after"] >= NWRITES - _missing(h, two), wr
