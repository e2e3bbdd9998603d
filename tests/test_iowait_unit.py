"""kernel/iowait.py on maps' records made by hand: a thread's time in swap-ins (iotop's SWAPIN) is part of
its I/O wait, counted from the ended waits and the wait in progress alike, per interval and per process."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ioscope.kernel import abi
from ioscope.kernel.iowait import (
    SWAPIN_FUNCTIONS,
    SwapGate,
    combine,
    per_process,
    set_swapin_functions,
    swap_used_kb,
    waited_between,
)

MS = 1_000_000


def ended(rows: list[tuple[int, int, int, int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(tid, tgid, ns, waits, swapin_ns, swapins) -> IOWAIT_VAL records and their tids."""
    v = np.zeros(len(rows), dtype=abi.IOWAIT_VAL)
    for i, (_tid, tgid, ns, n, sw, swn) in enumerate(rows):
        v[i]["tgid"], v[i]["ns"], v[i]["waits"], v[i]["swapin_ns"], v[i]["swapins"] = tgid, ns, n, sw, swn
    return v, np.array([r[0] for r in rows], dtype=np.uint32)


def started(rows: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(tid, tgid, began_ns, swapin) -> IOWAIT_START records and their tids."""
    s = np.zeros(len(rows), dtype=abi.IOWAIT_START)
    for i, (_tid, tgid, began, sw) in enumerate(rows):
        s[i]["tgid"], s[i]["ns"], s[i]["swapin"] = tgid, began, sw
    return s, np.array([r[0] for r in rows], dtype=np.uint32)


def test_swapin_time_is_part_of_the_wait_ended_or_in_progress() -> None:
    # thread 11 (process 10): 30 ms waited, 20 of them in swap-ins; blocked in a swap-in since 1,000 ms
    # thread 12 (process 10): 5 ms waited, no swap-in; blocked in another wait since 1,040 ms
    e, et = ended([(11, 10, 30 * MS, 3, 20 * MS, 2), (12, 10, 5 * MS, 1, 0, 0)])
    s, st = started([(11, 10, 1000 * MS, 1), (12, 10, 1040 * MS, 0)])
    a = combine(e, et, s, st, 1050 * MS)
    assert a.waited_ns.tolist() == [80 * MS, 15 * MS] and a.swapin_ns.tolist() == [70 * MS, 0]
    # 100 ms later: 11's swap-in ended at 1,080 ms (80 ms), and it is not blocked; 12 still is
    e2, et2 = ended([(11, 10, 110 * MS, 4, 100 * MS, 3), (12, 10, 5 * MS, 1, 0, 0)])
    s2, st2 = started([(12, 10, 1040 * MS, 0)])
    b = combine(e2, et2, s2, st2, 1150 * MS)
    w = waited_between(a, b)
    assert w.waited_ns.tolist() == [30 * MS, 100 * MS] and w.swapin_ns.tolist() == [30 * MS, 0]
    assert w.swapins.tolist() == [1, 0]
    (p,) = per_process(w)
    assert (p.pid, round(p.waited_s, 6), round(p.swapin_s, 6), p.swapins) == (10, 0.13, 0.03, 1)
    assert round(p.percent(w.seconds), 6) == 130.0 and round(p.swapin_percent(w.seconds), 6) == 30.0


def test_a_reused_thread_id_counts_its_swapins_from_zero() -> None:
    e, et = ended([(7, 7, 50 * MS, 2, 40 * MS, 2)])
    a = combine(e, et, *started([]), 100 * MS)
    e2, et2 = ended([(7, 9, 10 * MS, 1, 10 * MS, 1)])   # thread 7 exited and its id came back, in process 9
    w = waited_between(a, combine(e2, et2, *started([]), 200 * MS))
    assert w.swapin_ns.tolist() == [10 * MS] and w.waited_ns.tolist() == [10 * MS] and w.swapins.tolist() == [1]


class Globals:
    def __init__(self) -> None:
        self.set: dict[str, tuple[object, str]] = {}

    def set_global(self, name: str, value: object, fmt: str) -> None:
        self.set[name] = (value, fmt)


def test_the_swapin_functions_ranges_from_kallsyms(tmp_path: Path) -> None:
    ks = tmp_path / "kallsyms"
    ks.write_text("ffffffff81000000 T _stext\n"
                  "ffffffff815ea4a0 T do_swap_page\n"
                  "ffffffff815eb9c0 t wp_page_copy\n"
                  "ffffffff815b3f70 t shmem_swapin_folio\n"
                  "ffffffff815b4e80 T shmem_get_folio_gfp\n"
                  "ffffffffc0000000 t do_swap_page\t[fake_module]\n")
    g = Globals()
    assert set_swapin_functions(g, str(ks)) is None
    value, fmt = g.set["targ_swapin_fns"]
    assert fmt == "8Q" and value == (0xffffffff815ea4a0, 0xffffffff815eb9c0, 0xffffffff815b3f70, 0xffffffff815b4e80,
                                     0, 0, 0, 0)
    hidden = tmp_path / "hidden"   # kptr_restrict: every address 0
    hidden.write_text("".join(f"0000000000000000 T {f}\n" for f in SWAPIN_FUNCTIONS))
    g2 = Globals()
    assert "hidden" in (set_swapin_functions(g2, str(hidden)) or "") and not g2.set


class Flag:
    def __init__(self) -> None:
        self.writes: list[int] = []

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        assert key == b"\0\0\0\0"
        self.writes.append(int.from_bytes(value, "little"))


def test_the_stack_is_read_only_while_swap_is_in_use(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    flag = Flag()
    gate = SwapGate(flag, str(meminfo))
    for total, free in ((0, 0), (0, 0), (1048572, 1048572), (1048572, 1048060), (1048572, 1048060),
                        (1048572, 1048572)):
        meminfo.write_text(f"MemTotal:       24000000 kB\nSwapTotal:      {total} kB\nSwapFree:       {free} kB\n")
        gate.check()
    assert flag.writes == [0, 1, 0]   # written when it changes: no swap, 512 KiB in use, none again
    assert swap_used_kb(str(tmp_path / "absent")) == 1   # not known: looked for
