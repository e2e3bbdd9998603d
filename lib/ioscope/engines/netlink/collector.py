"""ioscope nic's collector: the interfaces' counters from netlink (RTM_GETLINK, IFLA_STATS64) and their
speed and duplex from sysfs, as one NicSample per read. It decides nothing about what is shown."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from pyroute2 import IPRoute  # type: ignore[import-untyped]  # no stubs, no py.typed

from ioscope.base.collector import Tick
from ioscope.base.errors import UsageError
from ioscope.engines.netlink.model import COUNTERS, LinkSample, NicSample

SYS_NET = Path("/sys/class/net")


def _sysfs(name: str, attr: str, root: Path = SYS_NET) -> str | None:
    try:
        return (root / name / attr).read_text().strip()
    except OSError:  # lo's speed: EINVAL; a link that is down: EINVAL; a device that just went: ENOENT
        return None


def link_speed(name: str, root: Path = SYS_NET) -> int | None:
    """The link speed in Mb/s, or None when the kernel does not know it (it reads -1, or refuses)."""
    text = _sysfs(name, "speed", root)
    try:
        v = int(text) if text is not None else -1
    except ValueError:
        return None
    return v if v > 0 else None


def link_duplex(name: str, root: Path = SYS_NET) -> str | None:
    text = _sysfs(name, "duplex", root)
    return text if text in ("full", "half") else None


class NicCollector:
    """One netlink socket, kept open; sample() dumps every link once (one consistent read of all)."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.ipr = IPRoute()
        self.names = list(dict.fromkeys(names))
        try:
            if self.names:
                have = set(self._dump())
                missing = [n for n in self.names if n not in have]
                if missing:
                    raise UsageError(f"unknown interface{'s' if len(missing) > 1 else ''} "
                                     f"{', '.join(repr(m) for m in missing)}",
                                     f"interfaces here: {', '.join(self._dump())}")
        except BaseException:
            self.close()
            raise

    def _dump(self) -> dict[str, LinkSample]:
        out: dict[str, LinkSample] = {}
        for msg in self.ipr.get_links():
            name = msg.get_attr("IFLA_IFNAME")
            stats = msg.get_attr("IFLA_STATS64") or {}
            if not name:
                continue
            out[name] = LinkSample(name=name, index=int(msg["index"]),
                                   counters={k: int(stats.get(k, 0)) for k in COUNTERS},
                                   speed_mbps=None, duplex=None)
        return out

    @property
    def unavailable(self) -> list[str]:
        return []   # netlink counters: nothing a kernel may lack

    def sample(self, tick: Tick | None = None) -> NicSample:
        """The counters now (cumulative: the model takes the difference of two samples)."""
        links = self._dump()
        mono, wall = time.monotonic(), time.time()
        if self.names:
            links = {n: links[n] for n in self.names if n in links}
        full = {n: LinkSample(lk.name, lk.index, lk.counters, link_speed(n), link_duplex(n)) for n, lk in links.items()}
        return NicSample(wall=wall, mono=mono, links=full)

    def close(self) -> None:
        self.ipr.close()


__all__ = ["NicCollector", "link_duplex", "link_speed"]
