"""Pure model of ioscope nic: two NicSamples -> one NicReport. No netlink, no files, no clock, no printing.

The columns are nicstat's (docs/nic.md): rKB/s and wKB/s (KB = 1024 bytes), rPk/s and wPk/s, the average
packet sizes rAvs and wAvs, %Util (the larger of the read and write bit rates over the link speed on a
full-duplex link, their sum on a half-duplex one), and Sat, errors + drops + overruns per second. The
extended columns (-x) are the counters Sat is made of, one by one, and collisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

KB = 1024

# The IFLA_STATS64 counters the model reads (struct rtnl_link_stats64, include/uapi/linux/if_link.h)
COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors", "rx_dropped",
            "tx_dropped", "rx_missed_errors", "rx_over_errors", "rx_fifo_errors", "tx_fifo_errors",
            "collisions")

# The extended columns (-x): name -> the counters summed into it. Sat is the sum of all but "coll".
EXTENDED: dict[str, tuple[str, ...]] = {
    "ierr": ("rx_errors",),
    "oerr": ("tx_errors",),
    "idrop": ("rx_dropped",),
    "odrop": ("tx_dropped",),
    "miss": ("rx_missed_errors",),
    "ovr": ("rx_over_errors", "rx_fifo_errors", "tx_fifo_errors"),
    "coll": ("collisions",),
}
SAT_PARTS = ("ierr", "oerr", "idrop", "odrop", "miss", "ovr")


@dataclass(frozen=True)
class LinkSample:
    """One interface at one moment: its counters (IFLA_STATS64) and its link speed and duplex (sysfs)."""

    name: str
    index: int                       # ifindex: a new one under the same name is a new interface
    counters: Mapping[str, int]
    speed_mbps: int | None           # None: the kernel does not know (virtual links, link down)
    duplex: str | None               # "full", "half", or None (unknown: computed as full, as nicstat does)


@dataclass(frozen=True)
class NicSample:
    wall: float                      # time.time() of the read
    mono: float                      # time.monotonic() of the read: the rates' denominator
    links: Mapping[str, LinkSample]  # by name, in the kernel's order


@dataclass
class NicRow:
    name: str
    index: int
    status: str                      # "ok", "reset" (a counter went back), "new", "gone"
    note: str = ""                   # why there are no rates, for status != "ok"
    deltas: dict[str, int] = field(default_factory=dict)   # counter increases over the interval
    rkb_s: float | None = None
    wkb_s: float | None = None
    rpk_s: float | None = None
    wpk_s: float | None = None
    ravs: float | None = None        # bytes per packet read; None without packets
    wavs: float | None = None
    util_pct: float | None = None    # None: no rates, or the link speed is unknown
    speed_mbps: int | None = None
    duplex: str | None = None
    sat_s: float | None = None
    ext_s: dict[str, float] = field(default_factory=dict)  # EXTENDED name -> per second

    @property
    def speed_known(self) -> bool:
        return self.speed_mbps is not None


@dataclass
class NicReport:
    wall: float                      # time of the later sample
    interval_s: float
    rows: list[NicRow]

    def unknown_speed(self) -> list[str]:
        return [r.name for r in self.rows if r.status == "ok" and not r.speed_known]


def util_pct(rx_bytes_s: float, tx_bytes_s: float, speed_mbps: int | None, duplex: str | None) -> float | None:
    """nicstat's %Util: the larger of the read and write bit rates over the link speed (full duplex, and
    unknown duplex), their sum on a half-duplex link; None when the speed is unknown."""
    if speed_mbps is None or speed_mbps <= 0:
        return None
    bits = (rx_bytes_s + tx_bytes_s if duplex == "half" else max(rx_bytes_s, tx_bytes_s)) * 8
    return 100.0 * bits / (speed_mbps * 1e6)


def _row(prev: LinkSample, cur: LinkSample, dt: float) -> NicRow:
    if prev.index != cur.index:
        return NicRow(cur.name, cur.index, "reset", note=f"re-created (ifindex {prev.index} -> {cur.index}): "
                      "no rates this interval", speed_mbps=cur.speed_mbps, duplex=cur.duplex)
    deltas = {k: cur.counters.get(k, 0) - prev.counters.get(k, 0) for k in COUNTERS}
    back = [k for k, v in deltas.items() if v < 0]
    if back:
        return NicRow(cur.name, cur.index, "reset", note=f"counters went back ({', '.join(back)}): wrapped or "
                      "reset by the driver; no rates this interval", speed_mbps=cur.speed_mbps, duplex=cur.duplex)
    rb, wb = deltas["rx_bytes"] / dt, deltas["tx_bytes"] / dt
    rp, wp = deltas["rx_packets"], deltas["tx_packets"]
    ext = {name: sum(deltas[c] for c in parts) / dt for name, parts in EXTENDED.items()}
    return NicRow(
        cur.name, cur.index, "ok", deltas=deltas,
        rkb_s=rb / KB, wkb_s=wb / KB, rpk_s=rp / dt, wpk_s=wp / dt,
        ravs=deltas["rx_bytes"] / rp if rp else None, wavs=deltas["tx_bytes"] / wp if wp else None,
        util_pct=util_pct(rb, wb, cur.speed_mbps, cur.duplex), speed_mbps=cur.speed_mbps, duplex=cur.duplex,
        sat_s=sum(ext[n] for n in SAT_PARTS), ext_s=ext,
    )


def build_report(prev: NicSample, cur: NicSample, only: Sequence[str] | None = None) -> NicReport:
    """The rates between two samples, one row per interface of cur (only those named in `only`, in that
    order, when given), plus a "gone" row for each one that was in prev and is not in cur."""
    dt = cur.mono - prev.mono
    if not dt > 0:
        raise ValueError(f"samples not in time order (interval {dt} s)")
    names = list(only) if only else list(dict.fromkeys([*cur.links, *prev.links]))
    rows = []
    for name in names:
        p, c = prev.links.get(name), cur.links.get(name)
        if c is None:
            if p is not None:
                rows.append(NicRow(name, p.index, "gone", note="removed during the interval"))
            continue
        if p is None:
            rows.append(NicRow(name, c.index, "new", note="appeared during the interval: rates from the next one",
                               speed_mbps=c.speed_mbps, duplex=c.duplex))
            continue
        rows.append(_row(p, c, dt))
    return NicReport(wall=cur.wall, interval_s=dt, rows=rows)


__all__ = ["COUNTERS", "EXTENDED", "KB", "SAT_PARTS", "LinkSample", "NicReport", "NicRow", "NicSample",
           "build_report", "util_pct"]
