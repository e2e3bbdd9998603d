"""The fleet report's model: the engines' rows -> a FleetResult with plain numbers (the same from either
engine: integers as int, the rest as float; percentiles in ns). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any


def _plain(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    return v


@dataclass
class FleetResult:
    engine: str
    per_disk_op: list[dict[str, Any]]    # host, disk, op, ios, bytes, iops, mb_s, q2c_p50 .. d2c_p999 (ns)
    top_processes: list[dict[str, Any]]  # host, pos, comm, ios, bytes
    hosts: list[dict[str, Any]]          # host, ios, q2c_p99 (ns): the slowest first


def build(engine: str, rows: dict[str, list[dict[str, Any]]]) -> FleetResult:
    def plain(name: str) -> list[dict[str, Any]]:
        return [{k: _plain(v) for k, v in r.items()} for r in rows.get(name, [])]

    return FleetResult(engine, plain("per_disk_op"), plain("top_processes"), plain("hosts"))


def comparable(r: FleetResult, digits: int = 3) -> dict[str, list[dict[str, Any]]]:
    """The result with floats rounded (to 0.001 of their unit): what two engines must agree on."""
    def rnd(v: Any) -> Any:
        return round(v, digits) if isinstance(v, float) else v
    return {name: [{k: rnd(v) for k, v in row.items()} for row in getattr(r, name)]
            for name in ("per_disk_op", "top_processes", "hosts")}
