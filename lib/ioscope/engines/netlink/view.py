"""One interface as JSON, the same row in ioscope nic's JSON and in top's nic panel."""

from __future__ import annotations

from typing import Any

from ioscope.engines.netlink.model import NicRow


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def row_json(r: NicRow) -> dict[str, Any]:
    return {
        "iface": r.name, "ifindex": r.index, "status": r.status, "note": r.note or None,
        "rkb_s": _r(r.rkb_s), "wkb_s": _r(r.wkb_s), "rpk_s": _r(r.rpk_s), "wpk_s": _r(r.wpk_s),
        "ravs": _r(r.ravs), "wavs": _r(r.wavs), "util_pct": _r(r.util_pct, 4),
        "speed_mbps": r.speed_mbps, "duplex": r.duplex, "sat_s": _r(r.sat_s),
        "ext_s": {k: round(v, 3) for k, v in r.ext_s.items()},
        "counts": dict(r.deltas),
    }
