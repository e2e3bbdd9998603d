"""ioscope nic as a panel of ioscope top: the network interfaces under the disks, toggled by the key n.

top imports this module when it starts (tools/top/cmd.py, OPTIONAL_SOURCES): it registers the panel drawing and
gives top a source that samples the interfaces once per refresh. The numbers are nic's (the same model and
the same JSON rows, in top's JSON under extras.nic); the panel is off until n is pressed.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ioscope.engines.netlink.collector import NicCollector
from ioscope.engines.netlink.model import NicSample, build_report
from ioscope.engines.netlink.view import row_json
from ioscope.tools.top import view

KEY = "n"
COLUMNS = (("rKB/s", "rkb_s"), ("wKB/s", "wkb_s"), ("rPk/s", "rpk_s"), ("wPk/s", "wpk_s"), ("%Util", "util_pct"),
           ("Sat", "sat_s"))
CELL = 10


def _cell(v: Any) -> str:
    return ("n/a" if v is None else view.fmt_num(float(v), CELL - 1)).rjust(CELL)


def panel(data: Any, width: int, rows: int) -> list[Text]:
    """The busiest interfaces first: one header line, one line per interface, in at most `rows` lines."""
    if not data or rows < 3:
        return []
    ifaces = sorted(data["interfaces"], key=lambda r: -((r["rkb_s"] or 0) + (r["wkb_s"] or 0)))
    name_w = max([4, *(len(r["iface"]) for r in ifaces)]) + 1
    out = [Text(f"network interfaces (ioscope nic; {KEY} hides)", style="bold"),
           Text("Int".ljust(name_w) + "".join(h.rjust(CELL) for h, _ in COLUMNS), style="bold")]
    for r in ifaces[: rows - 2]:
        if r["status"] != "ok":
            out.append(Text(r["iface"].ljust(name_w) + r["status"].rjust(CELL), style="yellow"))
        else:
            out.append(Text(r["iface"].ljust(name_w) + "".join(_cell(r[k]) for _, k in COLUMNS),
                            style="bold red" if r["sat_s"] else ""))
    for t in out:
        t.truncate(width)
    return out


class NicSource:
    """top's Source: one NicCollector, sampled once per refresh; returns nic's JSON rows."""

    def __init__(self) -> None:
        self.collector = NicCollector()
        self.prev: NicSample = self.collector.sample()

    def __call__(self, interval_s: float) -> dict[str, Any]:
        cur = self.collector.sample()
        rep = build_report(self.prev, cur)
        self.prev = cur
        return {"interval_s": round(rep.interval_s, 6), "interfaces": [row_json(r) for r in rep.rows]}

    def close(self) -> None:
        self.collector.close()


def top_source(btf: str | None) -> NicSource:
    return NicSource()


view.register_panel("nic", panel, key=KEY, help="network interfaces panel (ioscope nic's numbers), on / off")

__all__ = ["NicSource", "panel", "top_source"]
