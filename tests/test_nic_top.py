"""The nic panel of ioscope top: off until n is pressed, nic's numbers when on, n again hides it; batch text
and the golden screens do not change. No root: netlink's link dump needs none."""

from __future__ import annotations

import top_fixture
from ioscope.engines.netlink.model import COUNTERS, LinkSample, NicSample, build_report
from ioscope.engines.netlink.view import row_json
from ioscope.tools.top import cmd as top_cmd
from ioscope.tools.top import nic_panel as top_panel
from ioscope.tools.top import view


def _extras() -> dict[str, object]:
    def link(name: str, index: int, speed: int | None, **c: int) -> LinkSample:
        return LinkSample(name, index, {k: c.get(k, 0) for k in COUNTERS}, speed, "full" if speed else None)

    a = NicSample(0.0, 0.0, {"eth7": link("eth7", 2, 1000), "lo": link("lo", 1, None)})
    b = NicSample(1.0, 1.0, {"eth7": link("eth7", 2, 1000, rx_bytes=12_500_000, rx_packets=8_333, tx_dropped=3),
                             "lo": link("lo", 1, None, rx_bytes=2048, tx_bytes=2048, rx_packets=2, tx_packets=2)})
    return {"interval_s": 1.0, "interfaces": [row_json(r) for r in build_report(a, b).rows]}


def _plain(st: view.ViewState, snap: object, width: int = 100, height: int = 40) -> str:
    lines = view.screen_lines(st, snap, top_fixture.heat(), width, height)  # type: ignore[arg-type]
    return "\n".join(t.plain for t in lines)


def test_key_n_toggles_the_panel() -> None:
    snap = top_fixture.snapshot()
    snap.extras["nic"] = _extras()
    st = view.ViewState()
    assert "network interfaces" not in _plain(st, snap)         # off until asked for
    view.handle_key(st, "n")
    screen = _plain(st, snap)
    assert "network interfaces (ioscope nic; n hides)" in screen
    eth = next(ln for ln in screen.splitlines() if ln.startswith("eth7"))
    # 12.5 MB in 1 s on a 1000 Mb/s link: 12207.03 KB/s, 8333 packets/s, 10% util, Sat 3/s; busiest first
    assert eth.split() == ["eth7", "12207.03", "0.00", "8333.00", "0.00", "10.00", "3.00"]
    lo = next(ln for ln in screen.splitlines() if ln.startswith("lo "))
    assert lo.split()[5] == "n/a"                                 # no link speed: said, not 0
    assert screen.index("eth7") < screen.index("\nlo ")
    view.handle_key(st, "n")
    assert "network interfaces" not in _plain(st, snap)
    # batch text leaves toggled panels out; JSON carries the data
    assert "network interfaces" not in view.batch_text(snap)
    assert view.snapshot_json(snap)["extras"]["nic"]["interfaces"][0]["iface"] == "eth7"


def test_help_lists_the_key_and_small_screens_fit() -> None:
    st = view.ViewState(help=True)
    assert "network interfaces panel" in _plain(st, top_fixture.snapshot())
    snap = top_fixture.snapshot()
    snap.extras["nic"] = _extras()
    st = view.ViewState(panels_on={"nic"})
    for w, h in ((40, 10), (80, 24), (200, 50)):
        lines = view.screen_lines(st, snap, top_fixture.heat(), w, h)
        assert len(lines) <= h and all(len(t.plain) <= w for t in lines)


def test_top_starts_the_source_and_it_reads_the_real_interfaces() -> None:
    srcs = top_cmd.optional_sources(None)
    try:
        assert isinstance(srcs["nic"], top_panel.NicSource)
        data = srcs["nic"](0.1)
        assert "lo" in {r["iface"] for r in data["interfaces"]} and data["interval_s"] > 0
    finally:
        for s in srcs.values():
            s.close()
