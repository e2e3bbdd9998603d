"""ioscope nic's model and views on synthetic samples: no root, no netlink."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from ioscope.engines.netlink.collector import link_duplex, link_speed
from ioscope.engines.netlink.model import COUNTERS, KB, LinkSample, NicSample, build_report, util_pct
from ioscope.tools.nic.view import NicViewOptions, renderables, to_json


def _link(name: str = "eth9", index: int = 7, speed: int | None = 1000, duplex: str | None = "full",
          **counters: int) -> LinkSample:
    return LinkSample(name, index, {k: counters.get(k, 0) for k in COUNTERS}, speed, duplex)


def _sample(mono: float, *links: LinkSample) -> NicSample:
    return NicSample(wall=1_700_000_000.0 + mono, mono=mono, links={lk.name: lk for lk in links})


def _text(rep: object, extended: bool = False) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=200, color_system=None)
    for r in renderables(rep, NicViewOptions(extended=extended)):  # type: ignore[arg-type]
        con.print(r)
    return buf.getvalue()


def test_rates_and_averages() -> None:
    # 2 s: 3001 packets of 1514 bytes read, 1009 packets of 66 bytes written
    a = _link(rx_bytes=10_000, tx_bytes=500, rx_packets=10, tx_packets=5)
    b = _link(rx_bytes=10_000 + 3001 * 1514, tx_bytes=500 + 1009 * 66, rx_packets=10 + 3001, tx_packets=5 + 1009)
    rep = build_report(_sample(100.0, a), _sample(102.0, b))
    (r,) = rep.rows
    assert r.status == "ok" and rep.interval_s == 2.0
    assert r.deltas["rx_packets"] == 3001 and r.deltas["tx_bytes"] == 1009 * 66
    assert r.rkb_s == pytest.approx(3001 * 1514 / 2 / KB)
    assert r.wkb_s == pytest.approx(1009 * 66 / 2 / KB)
    assert r.rpk_s == pytest.approx(1500.5) and r.wpk_s == pytest.approx(504.5)
    assert r.ravs == pytest.approx(1514) and r.wavs == pytest.approx(66)
    # full duplex: the larger direction over 1000 Mb/s
    assert r.util_pct == pytest.approx(100 * 3001 * 1514 / 2 * 8 / 1e9)
    assert r.sat_s == 0


def test_util_full_half_unknown() -> None:
    assert util_pct(125e6, 50e6, 1000, "full") == pytest.approx(100.0)
    assert util_pct(125e6, 50e6, 1000, None) == pytest.approx(100.0)       # unknown duplex: as full
    assert util_pct(62.5e6, 62.5e6, 1000, "half") == pytest.approx(100.0)   # half: the sum
    assert util_pct(1e6, 1e6, None, "full") is None
    assert util_pct(1e6, 1e6, 0, "full") is None


def test_unknown_speed_is_said_not_zero() -> None:
    a, b = _link(speed=None, duplex=None), _link(speed=None, duplex=None, rx_bytes=4096, rx_packets=4)
    rep = build_report(_sample(0.0, a), _sample(1.0, b))
    assert rep.rows[0].util_pct is None and rep.unknown_speed() == ["eth9"]
    doc = to_json(rep)
    assert doc["interfaces"][0]["util_pct"] is None and doc["interfaces"][0]["speed_mbps"] is None
    text = _text(rep)
    assert "n/a" in text and "does not know the link speed of eth9" in text


def test_sat_and_extended_columns() -> None:
    a = _link()
    b = _link(rx_errors=2, tx_errors=3, rx_dropped=5, tx_dropped=7, rx_missed_errors=11, rx_over_errors=13,
              rx_fifo_errors=17, tx_fifo_errors=19, collisions=23)
    rep = build_report(_sample(0.0, a), _sample(2.0, b))
    r = rep.rows[0]
    assert r.ext_s == {"ierr": 1.0, "oerr": 1.5, "idrop": 2.5, "odrop": 3.5, "miss": 5.5, "ovr": 24.5, "coll": 11.5}
    assert r.sat_s == pytest.approx((2 + 3 + 5 + 7 + 11 + 13 + 17 + 19) / 2)   # collisions are not in Sat
    text = _text(rep, extended=True)
    head, line = text.splitlines()[1:3]
    assert head.split() == ["Time", "Int", "rKB/s", "wKB/s", "rPk/s", "wPk/s", "IErr/s", "OErr/s", "IDrop/s",
                            "ODrop/s", "Miss/s", "Ovr/s", "Coll/s", "%Util", "Sat"]
    assert line.split()[6:] == ["1.00", "1.50", "2.50", "3.50", "5.50", "24.50", "11.50", "0.00", "38.50"]


def test_counter_going_back_is_a_reset_not_negative() -> None:
    a = _link(rx_bytes=2**32 - 100, rx_packets=50)
    b = _link(rx_bytes=200, rx_packets=51)  # a 32-bit driver counter wrapped, or the driver reset it
    rep = build_report(_sample(0.0, a), _sample(1.0, b))
    r = rep.rows[0]
    assert r.status == "reset" and "rx_bytes" in r.note
    assert r.rkb_s is None and r.sat_s is None and r.util_pct is None
    doc = to_json(rep)["interfaces"][0]
    assert doc["status"] == "reset" and doc["rkb_s"] is None
    assert all(v >= 0 for v in doc["counts"].values())
    text = _text(rep)
    cells = text.splitlines()[2].split()
    assert cells[2] == "reset" and all(c == "-" for c in cells[3:]) and "counters went back" in text


def test_recreated_new_and_gone_interfaces() -> None:
    a = _link(index=7, rx_bytes=100)
    b = _link(index=8, rx_bytes=5000)   # same name, new ifindex: a new interface
    rep = build_report(_sample(0.0, a), _sample(1.0, b))
    assert rep.rows[0].status == "reset" and "re-created" in rep.rows[0].note
    rep = build_report(_sample(0.0, a), _sample(1.0, a, _link("veth1", 9)))
    assert [(r.name, r.status) for r in rep.rows] == [("eth9", "ok"), ("veth1", "new")]
    rep = build_report(_sample(0.0, a, _link("veth1", 9)), _sample(1.0, a))
    assert [(r.name, r.status) for r in rep.rows] == [("eth9", "ok"), ("veth1", "gone")]
    # -i: the order asked for
    rep = build_report(_sample(0.0, a, _link("veth1", 9)), _sample(1.0, a, _link("veth1", 9)), ["veth1", "eth9"])
    assert [r.name for r in rep.rows] == ["veth1", "eth9"]


def test_json_and_text_carry_the_same_numbers() -> None:
    a = _link()
    b = _link(rx_bytes=1_000_003, tx_bytes=70_001, rx_packets=997, tx_packets=101, tx_dropped=3)
    rep = build_report(_sample(0.0, a), _sample(1.0, b))
    doc = json.loads(json.dumps(to_json(rep)))
    assert set(doc) >= {"time", "interval_s", "lost", "lost_detail", "interfaces"}
    row = doc["interfaces"][0]
    lines = _text(rep).splitlines()
    assert lines[0].endswith("interval 1.000s")
    cells = lines[2].split()
    assert cells[1] == "eth9"
    for cell, key in zip(cells[2:], ("rkb_s", "wkb_s", "rpk_s", "wpk_s", "ravs", "wavs", "util_pct", "sat_s")):
        assert cell == f"{row[key]:.2f}", key
    assert row["counts"]["tx_dropped"] == 3 and row["sat_s"] == 3.0


def test_samples_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError):
        build_report(_sample(1.0, _link()), _sample(1.0, _link()))


def test_speed_and_duplex_from_sysfs(tmp_path: Path) -> None:
    for name, speed, duplex in (("a", "10000\n", "full\n"), ("b", "-1\n", "unknown\n"), ("c", "junk", "half")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "speed").write_text(speed)
        (tmp_path / name / "duplex").write_text(duplex)
    (tmp_path / "d").mkdir()   # no speed file at all (or one the kernel refuses to read: lo)
    assert link_speed("a", tmp_path) == 10000 and link_duplex("a", tmp_path) == "full"
    assert link_speed("b", tmp_path) is None and link_duplex("b", tmp_path) is None
    assert link_speed("c", tmp_path) is None and link_duplex("c", tmp_path) == "half"
    assert link_speed("d", tmp_path) is None and link_duplex("d", tmp_path) is None
