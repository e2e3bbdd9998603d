"""A fixed ioscope top snapshot and heat history for golden renders (shared by the view tests)."""

from __future__ import annotations

from ioscope.base import hist
from ioscope.tools.top.model import DeviceRow, HeatHistory, InFlightRow, ProcRow, Snapshot

WALL = 1_790_000_000.0  # a fixed moment; rendered in UTC by the tests


def snapshot() -> Snapshot:
    h_loop = hist.Hist.from_values([20_000] * 900 + [60_000] * 90 + [2_000_000] * 10)
    h_vda = hist.Hist.from_values([400_000] * 40 + [3_000_000] * 2)
    devs = [
        DeviceRow("loop2", 2400.5, 800.25, 9602.0, 3201.0, 0.0, 12.5, 0.02, 0.03, 0.07, 4.0, 4.0, 31.4,
                  h_loop.percentile(99) / 1e6, h_loop.count, h_loop),
        DeviceRow("vda", 40.0, 2.0, 1200.0, 8.0, 3.0, 1.0, 0.61, 2.5, 0.03, 30.0, 4.0, 2.1,
                  h_vda.percentile(99) / 1e6, h_vda.count, h_vda),
    ]
    procs = [
        ProcRow(31337, "fio", "loop2", 1600.0, 800.25, 6400.0, 3201.0, 4.0, 0.025, 0.06, 2400),
        ProcRow(4021, "postgres: walwriter", "loop2", 800.5, 0.0, 3202.0, 0.0, 4.0, 0.031, 1.9, 800),
        ProcRow(1, "systemd", "vda", 40.0, 0.0, 1200.0, 0.0, 30.0, 0.45, 2.9, 40),
        ProcRow(0, "[unknown]", "vda", 0.0, 2.0, 0.0, 8.0, 4.0, None, None, 2),
    ]
    # a hung I/O: vda's oldest bio in flight for 12.3 s (kernel/inflight.py), 3 bios over 1 s
    hung = [InFlightRow("vda", 12.3, 4242, "dd", None, 3)]
    return Snapshot(WALL, 1.0, "testhost", "6.18.0", devs, procs, 0, {}, "tp_btf",
                    {"loop2": h_loop, "vda": h_vda}, in_flight=hung)


def heat() -> HeatHistory:
    hh = HeatHistory(columns=240)
    for i in range(30):
        n = 100 + 10 * i
        vals = [20_000] * n + [60_000] * (n // 10) + ([2_000_000] * 3 if i % 7 == 0 else [])
        hh.push(WALL - 30 + i, {"loop2": hist.Hist.from_values(vals), "vda": hist.Hist.from_values([400_000] * 4)})
    return hh


class CountingSource:
    """An optional-panel source for the extension-point test: reports how often it was called."""

    closed = False

    def __init__(self, btf: str | None) -> None:
        self.calls = 0

    def __call__(self, interval_s: float) -> dict[str, float]:
        self.calls += 1
        return {"calls": self.calls, "interval_s": interval_s}

    def close(self) -> None:
        CountingSource.closed = True


def counting_source(btf: str | None) -> CountingSource:
    return CountingSource(btf)
