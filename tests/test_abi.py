"""Structs shared by kernel and user space agree: numpy dtypes vs the compiled objects' BTF."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from ioscope import registry
from ioscope.base import hist
from ioscope.kernel import _libbpf, abi
from ioscope.kernel.loader import OBJ_DIR

HEADER = Path(__file__).resolve().parent.parent / "bpf" / "ioscope.h"


OBJECTS = sorted(OBJ_DIR.glob("*.bpf.o"))


def _mirrors() -> list[tuple[str, str, np.dtype]]:
    out = []
    for mod in registry.ABI_MIRRORS:
        for name, dt in importlib.import_module(mod).STRUCTS.items():
            out.append((mod, name, dt))
    return out


def test_one_mirror_per_struct() -> None:
    """A struct is mirrored once (one definition per concept)."""
    seen: dict[str, list[str]] = {}
    for mod, name, _ in _mirrors():
        seen.setdefault(name, []).append(mod)
    assert {n: m for n, m in seen.items() if len(m) > 1} == {}


@pytest.mark.parametrize(("mod", "struct", "dt"), _mirrors(),
                         ids=[f"{m.rsplit('.', 2)[-2]}:{n}" for m, n, _ in _mirrors()])
def test_dtype_matches_btf(mod: str, struct: str, dt: np.dtype) -> None:
    """Every object that defines the struct agrees with its numpy mirror (every mirror module of the
    registry), and at least one does."""
    checked = 0
    for obj in OBJECTS:
        try:
            size, members = _libbpf.struct_layout(str(obj), struct)
        except _libbpf.BPFError:
            continue  # this object does not use the struct
        checked += 1
        assert dt.itemsize == size, obj.name
        assert [m[0] for m in members] == list(dt.names or ()), obj.name
        for name, offset, msize in members:
            field_dt, field_off = dt.fields[name][:2]  # type: ignore[index]
            assert (field_off, field_dt.itemsize) == (offset, msize), (obj.name, name)
    assert checked, f"no compiled object defines struct {struct}"


def _header_defines() -> dict[str, int]:
    text = HEADER.read_text()
    out = {m[0]: int(m[1]) for m in re.findall(r"#define (IOS_\w+) (\d+)", text)}
    for m in re.finditer(r"(IOS_\w+) = (\d+),", text):
        out[m[1]] = int(m[2])
    return out


def test_constants_match_header() -> None:
    d = _header_defines()
    assert d["IOS_HIST_SUB_BITS"] == hist.SUB_BITS
    assert d["IOS_HIST_MAX_LOG2"] == hist.MAX_LOG2
    assert d["IOS_NR_STATS"] == abi.NR_STATS and d["IOS_NR_LOST_STATS"] == abi.NR_LOST_STATS
    assert {k: d[f"IOS_PHASE_{k.upper()}"] for k in abi.PHASES} == abi.PHASES
    for code, name in abi.OP_NAMES.items():
        assert d[f"IOS_OP_{name.upper()}"] == code
    assert abi.HIST["slots"].shape == (hist.NBUCKETS,)
    stat_names = {"LOST_START_FULL": 0, "LOST_HIST_FULL": 1, "LOST_CHAIN_LONG": 2, "LOST_RQ_FULL": 3,
                  "LOST_C_UNSEEN": 4, "INFLIGHT_AT_START": 5, "STAT_SPLIT": 6, "STAT_STALE": 7,
                  "STAT_NEVER_ISSUED": 8, "STAT_REQUEUED": 9, "STAT_C_NOENTRY": 10,
                  "STAT_ONE_CLOCK": 14, "LOST_UNSTAMPED": 15, "LOST_IOWAIT_FULL": 16, "STAT_IOWAIT_STALE": 17}
    assert set(abi.STAT_NAMES) == set(stat_names.values())
    for cname, idx in stat_names.items():
        assert d[f"IOS_{cname}"] == idx and idx in abi.STAT_NAMES



def test_one_disk_filter_for_every_object() -> None:
    """-d means the same in every tool: every BPF object filters with bpf/devfilter.bpf.h (through
    common.bpf.h or directly), with the limit the loader checks, and no object has a filter of its own."""
    from ioscope.kernel import loader

    bpf = HEADER.parent
    text = (bpf / "devfilter.bpf.h").read_text()
    assert int(re.search(r"#define IOS_MAX_FILTER_DISKS (\d+)", text)[1]) == loader.MAX_FILTER_DISKS  # type: ignore[index]
    for src in sorted(bpf.glob("*.bpf.c")):
        code = src.read_text()
        # an object built from a shared body (readahead and readahead_noloop): check the body
        for inc in re.findall(r'#include "(\w+\.bpf\.[ch])"', code):
            if "char LICENSE[]" in (bpf / inc).read_text():
                code += (bpf / inc).read_text()
        assert '#include "common.bpf.h"' in code or '#include "devfilter.bpf.h"' in code, src.name
        assert "dev_filter SEC" not in code and "targ_disks" not in code, src.name
