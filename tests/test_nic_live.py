"""ioscope nic on a real veth pair: the numbers it prints against the workload's own counts and the kernel's
counters in sysfs.

The test makes a network namespace and a veth pair into it (tests/nic_veth.py), sends a prime number of UDP
datagrams of known sizes each way while `ioscope nic -j -i OUTER 1 N` runs, and checks packets exactly and
bytes (headers included) against sysfs's deltas and the sizes sent. Then it provokes drops both ways and
checks the Sat and -x columns against the kernel's drop counters.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import netns  # type: ignore[import-untyped]

from conftest import ioscope_cmd, json_lines
from nic_veth import HEADERS, VethPair, delta, drain, send, sysfs_counters, veth_pair

SMALL, BIG, BACK = 97, 53, 31          # datagrams: 100 B and 1000 B out, 300 B back
DOWN_DROPS, MTU_DROPS = 13, 7          # sent to a peer that is down; too big for the receiving end


@pytest.fixture
def pair(live: None) -> Iterator[VethPair]:
    with veth_pair() as p:
        yield p
    # nothing left behind: the namespace and both ends are gone
    assert p.ns not in netns.listnetns()
    assert not Path("/sys/class/net", p.outer).exists()


def _nic_during(p: VethPair, workload: Callable[[], None], *opts: str, count: int = 3) -> tuple[list[dict[str, Any]],
                                                                                             dict[str, int]]:
    """`ioscope nic -j -i OUTER OPTS 1 COUNT` while the workload runs; its JSON lines and sysfs's deltas
    over the whole run (read before it started and after it ended)."""
    before = sysfs_counters(p.outer)
    proc = subprocess.Popen(ioscope_cmd("nic", "-j", "-i", p.outer, *opts, "1", str(count)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("Tracing "), line
        t0 = time.monotonic()
        workload()
        assert time.monotonic() - t0 < count - 1, "workload slower than the run: counts would be cut"
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    after = sysfs_counters(p.outer)
    docs = json_lines(out)
    assert len(docs) == count
    return docs, delta(before, after)


def _rows(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    rows = []
    for d in docs:
        (r,) = d["interfaces"]
        assert r["iface"] == name and r["status"] == "ok", r
        rows.append({**r, "interval_s": d["interval_s"]})
    return rows


def _sum(rows: list[dict[str, Any]], key: str) -> int:
    return sum(r["counts"][key] for r in rows)


def test_bytes_and_packets_equal_the_workload_and_sysfs(pair: VethPair) -> None:
    rx_in, rx_out = pair.udp(inner=True), pair.udp(inner=False)
    sent: dict[str, int] = {}

    def workload() -> None:
        sent["tx_bytes"] = send(rx_out, pair.inner_ip, [100] * SMALL + [1000] * BIG)
        sent["rx_bytes"] = send(rx_in, pair.outer_ip, [300] * BACK)
        assert len(drain(rx_in, SMALL + BIG)) == SMALL + BIG   # every datagram arrived: the workload's count
        assert len(drain(rx_out, BACK)) == BACK

    docs, kernel = _nic_during(pair, workload)
    rows = _rows(docs, pair.outer)
    # packets: exactly the workload's, and exactly the kernel's
    assert _sum(rows, "tx_packets") == SMALL + BIG == kernel["tx_packets"]
    assert _sum(rows, "rx_packets") == BACK == kernel["rx_packets"]
    # bytes: the kernel counts the Ethernet, IP and UDP headers; nic equals sysfs, and sysfs the sizes sent
    assert _sum(rows, "tx_bytes") == kernel["tx_bytes"] == sent["tx_bytes"]
    assert _sum(rows, "rx_bytes") == kernel["rx_bytes"] == sent["rx_bytes"]
    assert sent["tx_bytes"] == SMALL * (100 + HEADERS) + BIG * (1000 + HEADERS)
    # the rates are those counts over each interval; the averages and %Util follow from them
    for r in rows:
        dt = r["interval_s"]
        # interval_s is rounded to 6 decimals, the rates are not (nic/view.py): each product is off by
        # rate x 0.5 us, a small fraction of a byte or packet at these rates
        assert r["wkb_s"] * 1024 * dt == pytest.approx(r["counts"]["tx_bytes"], abs=2)
        assert r["rkb_s"] * 1024 * dt == pytest.approx(r["counts"]["rx_bytes"], abs=2)
        assert r["wpk_s"] * dt == pytest.approx(r["counts"]["tx_packets"], abs=0.01)
        assert r["rpk_s"] * dt == pytest.approx(r["counts"]["rx_packets"], abs=0.01)
        if r["counts"]["tx_packets"]:
            assert r["wavs"] == pytest.approx(r["counts"]["tx_bytes"] / r["counts"]["tx_packets"], abs=1e-3)
        assert r["speed_mbps"] == 10000 and r["duplex"] == "full"   # veth's link speed, sysfs
        big = max(r["counts"]["tx_bytes"], r["counts"]["rx_bytes"]) / dt
        assert r["util_pct"] == pytest.approx(100 * big * 8 / 10000e6, abs=1e-4)
        assert r["sat_s"] == 0
    busy = [r for r in rows if r["counts"]["tx_packets"]]
    assert busy and all(r["wavs"] > 100 + HEADERS for r in busy)


def test_drops_show_in_sat_and_the_extended_columns(pair: VethPair) -> None:
    rx_in, rx_out = pair.udp(inner=True), pair.udp(inner=False)

    def workload() -> None:
        # the outer end's MTU below the datagrams the inner end sends: dropped on arrival (rx_dropped)
        pair.set_mtu(inner=False, mtu=1280)
        send(rx_in, pair.outer_ip, [1400] * MTU_DROPS)
        pair.set_mtu(inner=False, mtu=1500)
        # the peer down: what the outer end sends is dropped (tx_dropped)
        pair.set_up(inner=True, up=False)
        send(rx_out, pair.inner_ip, [100] * DOWN_DROPS)
        pair.set_up(inner=True, up=True)

    docs, kernel = _nic_during(pair, workload, "-x")
    rows = _rows(docs, pair.outer)
    assert _sum(rows, "tx_dropped") == DOWN_DROPS == kernel["tx_dropped"]
    assert _sum(rows, "rx_dropped") == MTU_DROPS == kernel["rx_dropped"]
    for key in ("rx_errors", "tx_errors", "rx_missed_errors", "rx_fifo_errors", "tx_fifo_errors", "collisions"):
        assert _sum(rows, key) == kernel[key], key
    # the same 0.5 us rounding of each interval_s: a small fraction of a drop per interval
    assert sum(r["ext_s"]["odrop"] * r["interval_s"] for r in rows) == pytest.approx(DOWN_DROPS, abs=0.01)
    assert sum(r["ext_s"]["idrop"] * r["interval_s"] for r in rows) == pytest.approx(MTU_DROPS, abs=0.01)
    assert sum(r["sat_s"] * r["interval_s"] for r in rows) == pytest.approx(DOWN_DROPS + MTU_DROPS, abs=0.02)
    assert any(r["sat_s"] > 0 for r in rows)


def test_interface_removed_and_made_again_during_a_run(pair: VethPair) -> None:
    """The watched interface is deleted, then a new one gets its name: nic says gone, then new, then reads
    the new one; it never prints a negative number and exits 0."""
    from pyroute2 import IPRoute  # type: ignore[import-untyped]

    proc = subprocess.Popen(ioscope_cmd("nic", "-j", "-i", pair.outer, "0.5", "6"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None and proc.stderr.readline().startswith("Tracing ")
        time.sleep(0.7)
        with IPRoute() as ipr:
            ipr.link("del", index=ipr.link_lookup(ifname=pair.outer)[0])   # takes the peer with it
            time.sleep(0.6)
            ipr.link("add", ifname=pair.outer, kind="veth", peer={"ifname": pair.outer + "p"})
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with IPRoute() as ipr:
            for idx in ipr.link_lookup(ifname=pair.outer):
                ipr.link("del", index=idx)
    assert proc.returncode == 0 and "Traceback" not in err, err
    statuses = [r["status"] for d in json_lines(out) for r in d["interfaces"]]
    assert "gone" in statuses and "new" in statuses, statuses
    assert statuses.index("gone") < statuses.index("new") and statuses[0] == "ok" and statuses[-1] == "ok"
    for d in json_lines(out):
        for r in d["interfaces"]:
            assert all(v >= 0 for v in r["counts"].values()), r
