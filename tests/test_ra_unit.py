"""No root: ABI of bpf/ra.h, histogram merges, grouping and renders of readsize/readahead/fair."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ioscope.base.fairness import Verdict
from ioscope.base.hist import Hist
from ioscope.base.losses import Losses
from ioscope.engines.procio import abi
from ioscope.engines.procio.collector import filter_devs, syscall_numbers
from ioscope.engines.procio.model import ProcIO, merge_procs
from ioscope.tools.fair.collector import blkio_limits
from ioscope.tools.fair.model import (
    FairReport,
    Group,
    Poor,
    ProcRate,
    ProcRow,
    balances,
    likely_causes,
    per_process,
)
from ioscope.tools.fair.view import text_lines, verdict_json
from ioscope.tools.readahead.collector import bdev_path, block_device_names, group_cached
from ioscope.tools.readsize.view import proc_json, proc_table, size_rows

OBJ = Path(__file__).resolve().parent.parent / "lib" / "ioscope" / "bpfobj"


def test_header_constants() -> None:
    text = (Path(__file__).resolve().parent.parent / "bpf" / "ra.h").read_text()
    assert f"RS_NR_STATS = {abi.RS_NR_STATS}" in text and f"RA_NR_HISTS = {abi.RA_NR_HISTS}" in text
    assert f"RA_H_AGE = {abi.RA_H_AGE}" in text and f"RA_NR_STATS = {abi.RA_NR_STATS}" in text


def _proc(pid: int, app: list[int], dev: list[int], ra: int = 0) -> ProcIO:
    return ProcIO(pid, "reader", "read", Hist.from_values(app), Hist.from_values(app), Hist.from_values(dev),
                  ra_count=ra, ra_bytes=sum(dev[:ra]))


def test_procio_merge_is_histogram_merge() -> None:
    a = _proc(7, [32768] * 3, [524288])
    b = _proc(7, [32768] * 4 + [4096], [131072, 524288], ra=2)
    m = a.merge(b)
    assert m.app_req.count == 8 and m.app_req.total == 7 * 32768 + 4096
    assert m.app_req.min == 4096 and m.app_req.max == 32768
    assert (m.dev.counts == a.dev.counts + b.dev.counts).all()
    assert m.ra_count == 2 and m.ra_bytes == 131072 + 524288
    acc: dict[tuple[int, str], ProcIO] = {}
    merge_procs(acc, [a])
    merge_procs(acc, [b, _proc(8, [1], [])])
    assert acc[(7, "read")].app_req.count == 8 and acc[(8, "read")].app_req.count == 1


def test_merge_with_empty_keeps_min_max() -> None:
    h = Hist.from_values([5, 9]).merge(Hist())
    assert (h.min, h.max, h.count) == (5, 9, 2)


def test_amplification_and_ratio() -> None:
    p = _proc(1, [32768] * 16, [524288])
    assert p.amplification == pytest.approx(1.0)
    assert p.size_ratio == pytest.approx(16.0)
    assert _proc(1, [], [4096]).amplification is None


def test_size_rows_and_render() -> None:
    p = _proc(4242, [32768] * 787, [524288] * 49, ra=49)
    assert size_rows(p.app_req, p.dev) == [
        (" 32.0K -> 64.0K ", 787, 0), (" 64.0K -> 128K  ", 0, 0), ("  128K -> 256K  ", 0, 0),
        ("  256K -> 512K  ", 0, 0), ("  512K -> 1.00M ", 0, 49)]
    text = "\n".join(proc_table([p], 5))
    assert text.splitlines()[1].split() == ["4242", "reader", "read", "787", "24.6M", "32.0K", "49", "24.5M",
                                           "512K", "24.5M", "1.00"]
    assert "device requests 16.0x the application's size" in text


def test_json_shape() -> None:
    doc = proc_json(_proc(3, [32768] * 2, [65536], ra=1))
    assert set(doc) >= {"pid", "comm", "app", "dev"}
    assert set(doc["app"]) >= {"count", "bytes", "buckets"}
    assert set(doc["dev"]) >= {"count", "bytes", "ra_count", "ra_bytes", "buckets"}
    assert doc["app"]["buckets"] == [[32768, 36864, 2]]


def test_group_cached() -> None:
    keys = np.zeros(5, dtype=abi.RA_PAGE_KEY)
    vals = np.zeros(5, dtype=abi.RA_PAGE)
    keys["dev"], keys["ino"], keys["index"] = [7, 7, 7, 8, 7], [12, 12, 12, 12, 13], [0, 1, 2, 0, 0]
    vals["tgid"] = [100, 100, 101, 100, 100]
    assert group_cached(keys, vals) == {(7, 12, 100): 2, (7, 12, 101): 1, (8, 12, 100): 1, (7, 13, 100): 1}
    assert group_cached(keys[:0], vals[:0]) == {}


def _fair_report(rates: dict[int, ProcRate], bal: dict[str, Verdict], poor: dict[str, Poor]) -> FairReport:
    rows = [ProcRow(r, r, float(r.read), float(r.dev_read), float(r.write), float(r.dev_write))
            for r in sorted(rates.values(), key=ProcRate.sort_key)]
    return FairReport(wall=1_700_000_000.0, seconds=1.0, by="app", disks=[], rows=rows,
                      groups=[Group("loop0", rows, bal, bal, poor)], losses=Losses())


def test_fair_render_and_balance() -> None:
    rates = {1: ProcRate(1, "fast", read=48 << 20, dev_read=48 << 20), 2: ProcRate(2, "slow", read=4 << 20)}
    bal = balances(rates, "app", 0.01)
    v = bal["read"]
    b, pids = v.balance, v.pids
    assert pids == [1, 2] and v.poor and v.enough and "write" not in bal
    assert b.jain == pytest.approx(52 ** 2 / (2 * (48 ** 2 + 4 ** 2)))
    lines = text_lines(_fair_report(rates, bal, {"read": Poor([], ["x"])}))
    assert lines[0].endswith("  interval 1.000s  lost 0")
    assert lines[2].split() == ["1", "fast", "48.0M", "48.0M", "0", "0", "48.0M", "48.0M"]
    assert lines[4] == "on loop0: 2 processes this interval: 1 (fast), 2 (slow)"  # the processes on one disk
    assert "Jain 0.583  POOR" in lines[5] and lines[6] == "    likely causes:" and lines[7] == "    - x"


def test_per_process_sums_directions() -> None:
    r = ProcIO(5, "w", "write", Hist.from_values([4096]), Hist.from_values([4096]), Hist.from_values([8192]))
    rates = per_process([_proc(5, [100], [4096], ra=1), r])
    assert (rates[5].read, rates[5].dev_read, rates[5].write, rates[5].dev_write, rates[5].ra_bytes) == \
        (100, 4096, 4096, 8192, 4096)


def test_blkio_limits_fixture(tmp_path: Path) -> None:
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "cgroup").write_text("7:blkio:/slow\n0::/v2slow\n")
    (tmp_path / "cg" / "blkio" / "slow").mkdir(parents=True)
    (tmp_path / "cg" / "blkio" / "slow" / "blkio.throttle.read_bps_device").write_text("7:3 4194304\n")
    (tmp_path / "cg" / "unified" / "v2slow").mkdir(parents=True)
    (tmp_path / "cg" / "unified" / "v2slow" / "io.max").write_text("7:3 rbps=1048576 wbps=max riops=max wiops=max\n")
    got = blkio_limits(42, str(tmp_path / "proc"), str(tmp_path / "cg"))
    assert got == ["cgroup /slow read_bps_device 7:3 4194304",
                   "cgroup /v2slow io.max 7:3 rbps=1048576 wbps=max riops=max wiops=max"]
    assert blkio_limits(43, str(tmp_path / "proc"), str(tmp_path / "cg")) == []


def test_filter_devs_includes_partitions(tmp_path: Path) -> None:
    from ioscope.base.devices import BlockDevice, kdev

    d = tmp_path / "block" / "sdz"
    (d / "sdz1").mkdir(parents=True)
    (d / "sdz1" / "dev").write_text("8:241\n")
    (d / "sdz1" / "partition").write_text("1\n")
    (d / "queue").mkdir()
    assert filter_devs(BlockDevice("sdz", 8, 240), str(tmp_path)) == [kdev(8, 240), kdev(8, 241)]


def test_block_device_paths(tmp_path: Path) -> None:
    """A block device read through its own page cache is named /dev/<disk or partition>."""
    from ioscope.base.devices import kdev

    for name, dev in (("loop3", "7:3"), ("sdz", "8:240")):
        (tmp_path / "block" / name).mkdir(parents=True)
        (tmp_path / "block" / name / "dev").write_text(dev + "\n")
    part = tmp_path / "block" / "sdz" / "sdz1"
    part.mkdir()
    for f, v in (("dev", "8:241"), ("partition", "1"), ("start", "2048"), ("size", "4096")):
        (part / f).write_text(v + "\n")
    (tmp_path / "class" / "block").mkdir(parents=True)
    (tmp_path / "class" / "block" / "sdz1").symlink_to(part)
    names = block_device_names(str(tmp_path))
    assert names == {kdev(7, 3): "loop3", kdev(8, 240): "sdz", kdev(8, 241): "sdz1"}
    assert bdev_path(kdev(8, 241), names) == "/dev/sdz1" and bdev_path(kdev(7, 3), names) == "/dev/loop3"
    assert bdev_path(kdev(9, 9), names) == "/dev/block/9:9"


def test_syscall_numbers() -> None:
    assert syscall_numbers("x86_64")["preadv2"] == 327
    assert syscall_numbers("aarch64")["read"] == 63
    from ioscope.base.errors import IoscopeError

    with pytest.raises(IoscopeError):
        syscall_numbers("pdp11")


def test_cause_thrown_away_readahead() -> None:
    rates = {1: ProcRate(1, "a", read=10 << 20, dev_read=50 << 20, ra_bytes=50 << 20),
             2: ProcRate(2, "b", read=2 << 20, dev_read=10 << 20, ra_bytes=10 << 20)}
    v = balances(rates, "app", 0.01)["read"]
    causes = likely_causes(rates, v.balance, v.pids, [], "read", "app")
    assert any(c.startswith("the device read 5.0x what these processes got") for c in causes)


def test_fair_noise_gets_no_verdict() -> None:
    # two processes that wrote 5 and 64 bytes: Jain 0.58, but nothing to judge
    rates = {1: ProcRate(1, "sh", write=5), 2: ProcRate(2, "logger", write=64)}
    v = balances(rates, "app", 0.01)["write"]
    assert v.balance.jain == pytest.approx(69 ** 2 / (2 * (5 ** 2 + 64 ** 2)))
    assert v.balance.poor and not v.enough and not v.poor
    doc = verdict_json(v)
    assert doc["poor"] is False and doc["enough_activity"] is False and doc["min_bytes"] == 1 << 20
    lines = text_lines(_fair_report(rates, {"write": v}, {}))
    line = next(x for x in lines if x.strip().startswith("interval write balance"))
    assert "too little write I/O to judge (69B, under --min-bytes 1.00MiB)" in line and "POOR" not in line
    # the same imbalance with enough bytes is judged: the threshold is the sum over the processes compared
    rates = {1: ProcRate(1, "a", write=5 << 16), 2: ProcRate(2, "b", write=64 << 16)}
    assert balances(rates, "app", 0.01)["write"].poor
    assert not balances(rates, "app", 0.01, min_bytes=(69 << 16) + 1)["write"].poor


def test_fair_throttle_cause_is_about_the_same_operation(tmp_path: Path) -> None:
    from ioscope.tools.fair.model import limit_applies

    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("5:blkio:/slow\n0::/slow2\n")
    (cg / "blkio" / "slow").mkdir(parents=True)
    (cg / "blkio" / "slow" / "blkio.throttle.read_bps_device").write_text("7:3 4194304\n")
    (cg / "blkio" / "slow" / "blkio.throttle.write_iops_device").write_text("7:3 100\n")
    (cg / "unified" / "slow2").mkdir(parents=True)
    (cg / "unified" / "slow2" / "io.max").write_text("7:3 rbps=1048576 wbps=max riops=max wiops=max\n")
    limits = blkio_limits(42, str(proc), str(cg))
    assert len(limits) == 3
    reads = [x for x in (limit_applies("read", lim) for lim in limits) if x]
    writes = [x for x in (limit_applies("write", lim) for lim in limits) if x]
    assert reads == ["cgroup /slow read_bps_device 7:3 4194304", "cgroup /slow2 io.max 7:3 rbps=1048576"]
    assert writes == ["cgroup /slow write_iops_device 7:3 100"]
    # the collector hands the limits to the model: a throttled reader is named for reads, not for writes
    rates = {42: ProcRate(42, "slow", read=1 << 20, write=1 << 20), 1: ProcRate(1, "fast", read=8 << 20,
                                                                              write=8 << 20)}
    for op, want in (("read", reads), ("write", writes)):
        v = balances(rates, "app", 0.01)[op]
        causes = [c for c in likely_causes(rates, v.balance, v.pids, [], op, "app", {42: limits}) if "throttled" in c]
        assert causes == [f"pid 42 (slow) is throttled: {w}" for w in want]
    v = balances(rates, "app", 0.01)["read"]
    assert not [c for c in likely_causes(rates, v.balance, v.pids, [], "read", "app", {}) if "throttled" in c]
