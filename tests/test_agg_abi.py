"""bpf/agg.h's constants and enums against their Python mirrors (the structs: tests/test_abi.py)."""

from __future__ import annotations

import re
from pathlib import Path

from ioscope.engines.aggregate import abi, expr

HEADER = (Path(__file__).resolve().parent.parent / "bpf" / "agg.h").read_text()


def _values() -> dict[str, int]:
    out = {m[0]: int(m[1]) for m in re.findall(r"#define (AGG_\w+) (\d+)", HEADER)}
    for m in re.finditer(r"(AGG_\w+) = (\d+)", HEADER):
        out[m[1]] = int(m[2])
    return out


def test_constants_and_enums_match() -> None:
    v = _values()
    assert v["AGG_MAX_EXPRS"] == abi.MAX_EXPRS == expr.MAX_EXPRS
    assert v["AGG_MAX_INSNS"] == abi.MAX_INSNS == expr.MAX_INSNS
    assert v["AGG_NR_KEYS"] == abi.NR_KEYS and v["AGG_NR_FIELDS"] == abi.NR_FIELDS
    assert {name: v[f"AGG_F_{name.upper()}"] for name in abi.FIELDS} == abi.FIELDS
    assert (v["AGG_K_SCALAR"], v["AGG_K_LOGLIN"], v["AGG_K_LINEAR"]) == (abi.K_SCALAR, abi.K_LOGLIN, abi.K_LINEAR)
    assert (v["AGG_I_CMP"], v["AGG_I_AND"], v["AGG_I_OR"], v["AGG_I_NOT"]) == (expr.I_CMP, expr.I_AND, expr.I_OR,
                                                                                  expr.I_NOT)
    names = {"==": "EQ", "!=": "NE", "<": "LT", "<=": "LE", ">": "GT", ">=": "GE"}
    assert {op: v[f"AGG_C_{n}"] for op, n in names.items()} == expr.CMP_CODES
    assert {v["AGG_LOST_AGG_FULL"]: "agg_map_full", v["AGG_STAT_NO_EXTRA"]: "queue_details_lost",
            v["AGG_LOST_STACK"]: "stack_lost"} == abi.STAT_NAMES
    assert v["AGG_STACK_DEPTH"] == abi.STACK_DEPTH
    assert (v["AGG_FILE_DEPTH"], v["AGG_FILE_NAME"]) == (abi.FILE_DEPTH, abi.FILE_NAME)
    # every key of the language has a kernel field among the key fields
    assert set(abi.KEY_FIELD) == set(expr.KEYS)
    assert all(abi.FIELDS[f] < abi.NR_KEYS for f in abi.KEY_FIELD.values())
    assert all(v in abi.FIELDS for v in expr.VALUES)
