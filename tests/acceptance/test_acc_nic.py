"""Acceptance: `ioscope nic` the way a user runs it, started in the background by a script and stopped with a
signal, on a veth pair into a network namespace the test made.

The script is what a user writes: `ioscope nic -i IFACE > out 2> err &`, a workload (a prime number of UDP
datagrams of one size, sent by a Python one-liner), then `kill -INT $!` (or SIGTERM, SIGHUP). Without an
interval nic prints once, at the end, the rates over the whole run. It must stop within 2 s, exit 0, and the
text it printed times the interval must be the workload: packets exactly, bytes (headers included) within
the rounding of the printed rate, both equal to the kernel's sysfs counters. A second run with -x sends to
a peer that is down: ODrop/s and Sat times the interval are the datagrams dropped.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import EMULATION_FACTOR, PY
from nic_veth import HEADERS, PORT, VethPair, delta, drain, sysfs_counters, veth_pair

DATAGRAMS = 101       # of PAYLOAD bytes each
PAYLOAD = 512
DROPPED = 11          # sent while the peer is down
STOP_WITHIN_S = 2.0 * EMULATION_FACTOR


@pytest.fixture
def pair(live: None) -> Iterator[VethPair]:
    with veth_pair() as p:
        yield p


def _script(tmp: Path, p: VethPair, opts: list[str], n: int, sig: str) -> tuple[str, dict[str, int], float]:
    """sh: nic in the background, the workload, kill -SIG; returns (stdout, sysfs deltas, seconds to stop)."""
    nic = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ioscope.cli", "nic", "-i", p.outer, *opts])
    send = (f"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range({n}): s.sendto(b'x' * {PAYLOAD}, ({p.inner_ip!r}, {PORT}))")
    script = (f"{nic} > {tmp}/out 2> {tmp}/err &\n"
              f"pid=$!\n"
              f"until grep -q Tracing {tmp}/err 2>/dev/null || ! kill -0 $pid 2>/dev/null; do sleep 0.05; done\n"
              f"{PY} -c {shlex.quote(send)}\n"
              f"sleep 0.7\n"
              f"date +%s.%N > {tmp}/killed\n"
              f"kill -{sig} $pid\n"
              f"wait $pid\n"
              f"echo $? > {tmp}/rc\n"
              f"date +%s.%N > {tmp}/ended\n")
    before = sysfs_counters(p.outer)
    # generous: the kernel matrix's guests (emulated) take many seconds to start a tool
    assert subprocess.run(["sh", "-c", script], stdin=subprocess.DEVNULL, timeout=300).returncode == 0
    after = sysfs_counters(p.outer)
    err = (tmp / "err").read_text()
    assert (tmp / "rc").read_text().strip() == "0", err
    assert "Traceback" not in err, err
    took = float((tmp / "ended").read_text()) - float((tmp / "killed").read_text())
    return (tmp / "out").read_text(), delta(before, after), took


def _row(out: str, iface: str) -> tuple[float, dict[str, str]]:
    """The interval of the one report printed and the interface's row, by column heading."""
    lines = out.splitlines()
    assert len([ln for ln in lines if "  interval " in ln]) == 1, out    # no interval: one report, at the end
    interval = float(lines[0].rsplit("interval ", 1)[1].rstrip("s"))
    head = lines[1].split()
    assert head[:2] == ["Time", "Int"], out
    (row,) = [ln.split() for ln in lines[2:] if ln.split()[1:2] == [iface]]
    return interval, dict(zip(head, row))


@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP"])
def test_nic_stopped_by_a_script(pair: VethPair, tmp_path: Path, sig: str) -> None:
    rx = pair.udp(inner=True)
    out, kernel, took = _script(tmp_path, pair, [], DATAGRAMS, sig)
    assert took < STOP_WITHIN_S, took
    assert len(drain(rx, DATAGRAMS)) == DATAGRAMS        # the workload's own count: all arrived
    assert kernel["tx_packets"] == DATAGRAMS and kernel["tx_bytes"] == DATAGRAMS * (PAYLOAD + HEADERS)
    dt, row = _row(out, pair.outer)
    assert round(float(row["wPk/s"]) * dt) == DATAGRAMS
    assert round(float(row["rPk/s"]) * dt) == 0
    # rates are printed with 2 decimals and the interval with 3: the bytes they give are exact to that
    wkb = float(row["wKB/s"])
    assert abs(wkb * 1024 * dt - kernel["tx_bytes"]) <= 0.005 * 1024 * dt + wkb * 1024 * 0.0005 + 1
    # wAvs is printed with 2 decimals (nic/view.py): half its last digit
    assert float(row["wAvs"]) == pytest.approx(PAYLOAD + HEADERS, abs=0.005)
    # veth says 10000 Mb/s full duplex: %Util is the write rate over it, printed with 2 decimals (half its last digit)
    assert float(row["%Util"]) == pytest.approx(100 * kernel["tx_bytes"] / dt * 8 / 10000e6, abs=0.005)
    assert row["Sat"] == "0.00"


def test_nic_x_counts_drops(pair: VethPair, tmp_path: Path) -> None:
    pair.set_up(inner=True, up=False)
    try:
        out, kernel, took = _script(tmp_path, pair, ["-x"], DROPPED, "INT")
    finally:
        pair.set_up(inner=True, up=True)
    assert took < STOP_WITHIN_S, took
    assert kernel["tx_dropped"] == DROPPED and kernel["tx_packets"] == 0
    dt, row = _row(out, pair.outer)
    assert round(float(row["ODrop/s"]) * dt) == DROPPED
    assert round(float(row["Sat"]) * dt) == DROPPED
    assert round(float(row["wPk/s"]) * dt) == 0
    for col in ("IErr/s", "OErr/s", "IDrop/s", "Miss/s", "Ovr/s", "Coll/s"):
        assert row[col] == "0.00", (col, out)
