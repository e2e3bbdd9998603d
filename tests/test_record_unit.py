"""ioscope record's pure parts: sizes, loss accounting, device metadata from a fixture /sys (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from ioscope.base import devices
from ioscope.engines.recording.recorder import (
    HOOKS,
    NR_STATS,
    STAT_LOST_EVENT,
    STAT_LOST_NEST,
    STAT_LOST_NOTE,
    STAT_PID_MAP_FULL,
    capture_lost,
    record_losses,
    ring_slots,
)
from ioscope.tools.common import parse_size


@pytest.mark.parametrize("text, value", [
    ("4096", 4096), ("64M", 64 << 20), ("64m", 64 << 20), ("1G", 1 << 30), ("512KiB", 512 << 10),
    ("1.5g", 3 << 29), ("2T", 2 << 40), ("10MB", 10 << 20),
])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "-1M", "0", "nan", "inf", "5X"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text, "--buffer")


def test_ring_slots_share_the_buffer_in_powers_of_two() -> None:
    # 32 MiB over 2 CPUs x 3 levels: 99,864 slots of 56 bytes each, rounded up
    assert ring_slots(32 << 20, 6) == 131072
    assert ring_slots(None, 6) == 131072  # the default is 32 MiB
    assert ring_slots(56 * 4096 * 6, 6) == 4096  # exact powers stay
    assert ring_slots(1, 6) == 1024  # never below the minimum
    assert ring_slots(1 << 30, 1) & (ring_slots(1 << 30, 1) - 1) == 0
    # 128 CPUs: the default 32 MiB would leave 1,560 slots per ring; it takes 8192 (56 MiB in all)
    assert ring_slots(None, 384) == 8192 and ring_slots(32 << 20, 384) == 2048


def test_losses_json_and_total() -> None:
    """record's losses are the one Losses type; the capture keeps its meta['lost'] layout (older readers)."""
    per_cpu = np.zeros((2, NR_STATS), dtype=np.uint64)
    per_cpu[:, STAT_LOST_EVENT] = [3, 0]
    per_cpu[:, STAT_LOST_NOTE] = [0, 2]
    per_cpu[1, STAT_PID_MAP_FULL] = 1
    lo = record_losses(per_cpu, recursion_misses=5)
    assert lo.lost == 11  # a bio not followed under -p means its request events are missing
    doc = capture_lost(lo, per_cpu)
    assert doc["total"] == 11 and doc["ringbuf_full_notes"] == 2 and doc["recursion_misses"] == 5
    assert doc["per_cpu"]["ringbuf_full_events"] == [3, 0] and doc["per_cpu"]["ringbuf_full_notes"] == [0, 2]
    assert "3 ringbuf_full_events (events, ring full: raise --buffer)" in lo.describe()
    assert "5 recursion_misses" in lo.describe()
    assert lo.to_json()["lost"] == 11 and lo.to_json()["lost_detail"]["pid_map_full"] == 1
    none = record_losses(np.zeros((2, NR_STATS), np.uint64), 0)
    assert none.lost == 0 and none.describe() == "none"
    nest = np.zeros((2, NR_STATS), np.uint64)
    nest[0, STAT_LOST_NEST] = 4
    lo = record_losses(nest, 0)
    assert lo.lost == 4 and capture_lost(lo, nest)["nested_too_deep"] == 4 and "nested 3 deep" in lo.describe()


def test_every_hook_has_a_program_pair() -> None:
    """Each hook the recorder can choose exists as tp_btf and raw_tp in the compiled object."""
    from ioscope.kernel import _libbpf
    from ioscope.kernel.loader import object_path
    progs = {name for name, _sec, _auto in _libbpf.Object(str(object_path("record"))).programs()}
    for hook in HOOKS:
        assert {f"btf_{hook}", f"raw_{hook}"} <= progs, hook


def _fake_sys(root: Path) -> None:
    for name, dev, size, sched in (("loop3", "7:3", 614400, "none [mq-deadline] kyber"),
                                   ("vda", "254:0", 2097152, "[none] mq-deadline")):
        d = root / "block" / name
        (d / "queue").mkdir(parents=True)
        (d / "dev").write_text(dev + "\n")
        (d / "size").write_text(f"{size}\n")
        (d / "queue" / "scheduler").write_text(sched + "\n")
        for k, v in (("nr_requests", 64), ("read_ahead_kb", 128), ("max_sectors_kb", 1280), ("rotational", 0),
                     ("logical_block_size", 512)):
            (d / "queue" / k).write_text(f"{v}\n")
        (root / "class" / "block").mkdir(parents=True, exist_ok=True)
        (root / "class" / "block" / name).symlink_to(d)
    part = root / "block" / "loop3" / "loop3p1"
    part.mkdir()
    (part / "partition").write_text("1\n")
    (part / "dev").write_text("259:0\n")
    (part / "start").write_text("2048\n")
    (part / "size").write_text("262144\n")
    (root / "class" / "block" / "loop3p1").symlink_to(part)


def test_device_and_partition_metadata(tmp_path: Path) -> None:
    _fake_sys(tmp_path)
    meta = devices.device_meta(None, str(tmp_path))
    assert set(meta) == {"7,3", "254,0"}
    loop = meta["7,3"]
    assert loop == {"name": "loop3", "major": 7, "minor": 3, "size_bytes": 614400 * 512, "scheduler": "mq-deadline",
                    "nr_requests": 64, "read_ahead_kb": 128, "max_sectors_kb": 1280, "rotational": 0,
                    "logical_block_size": 512}
    only = devices.device_meta([devices.BlockDevice("vda", 254, 0)], str(tmp_path))
    assert set(only) == {"254,0"} and only["254,0"]["scheduler"] == "none"
    parts = devices.partition_meta(str(tmp_path))
    assert parts == {"259,0": {"name": "loop3p1", "major": 259, "minor": 0, "disk": "7,3", "start_sector": 2048,
                               "size_bytes": 262144 * 512}}


def test_present_cpus_reads_the_highest_id(tmp_path: Path) -> None:
    from ioscope.base.system import present_cpus
    d = tmp_path / "devices/system/cpu"
    d.mkdir(parents=True)
    (d / "present").write_text("0-3,8-11\n")
    assert present_cpus(str(tmp_path)) == 12
    (d / "present").write_text("0\n")
    assert present_cpus(str(tmp_path)) == 1
    assert present_cpus(str(tmp_path / "nowhere")) >= 1  # falls back to the CPU count


def test_count_completions_as_the_kernel_counts_them() -> None:
    """A write with data through the flush sequence completes twice (its data, then the original
    request, 0 bytes) and /proc/diskstats counts it once; a flush request and an empty flush bio's
    end are both counted."""
    import numpy as np

    from ioscope.capture.events import (
        EVENT,
        TA_COMPLETE,
        TA_QUEUE,
        TA_SPLIT,
        TC_FLUSH,
        TC_FUA,
        TC_SYNC,
        TC_WRITE,
    )
    from ioscope.engines.recording.recorder import count_completions

    wb, wb_fua, wt = (7 << 20) | 0, (7 << 20) | 1, (7 << 20) | 2   # write-back no FUA, write-back FUA, write-through
    rows = []

    def ev(dev: int, act: int, cat: int, nbytes: int) -> None:
        rows.append((len(rows), 0, 0, nbytes, dev, 0, 1, 1, 0, 0, act, cat, 0))

    for dev in (wb, wb_fua, wt):
        # a journal commit block: PREFLUSH|FUA write with data: flush C, data C, end C (0 bytes)
        ev(dev, TA_QUEUE, TC_WRITE | TC_SYNC | TC_FLUSH | TC_FUA, 4096)
        ev(dev, TA_COMPLETE, TC_FLUSH, 0)
        ev(dev, TA_COMPLETE, TC_WRITE | TC_SYNC, 4096)
        ev(dev, TA_COMPLETE, TC_WRITE | TC_SYNC | TC_FLUSH | TC_FUA, 0)
        # an O_DSYNC direct write (FUA only), split once: two pieces
        ev(dev, TA_QUEUE, TC_WRITE | TC_SYNC | TC_FUA, 8192)
        ev(dev, TA_SPLIT, TC_WRITE | TC_SYNC | TC_FUA, 8192)
        for _ in range(2):
            ev(dev, TA_COMPLETE, TC_WRITE | TC_SYNC, 4096)
            ev(dev, TA_COMPLETE, TC_WRITE | TC_SYNC | TC_FUA, 0)
        # a plain write and an empty flush (sync): flush request + end of the empty write, both counted
        ev(dev, TA_QUEUE, TC_WRITE, 4096)
        ev(dev, TA_COMPLETE, TC_WRITE, 4096)
        ev(dev, TA_QUEUE, TC_WRITE | TC_FLUSH, 0)
        ev(dev, TA_COMPLETE, TC_FLUSH, 0)
        ev(dev, TA_COMPLETE, TC_WRITE | TC_FLUSH, 0)
    arr = np.array(rows, dtype=EVENT)
    into: dict[int, int] = {}
    count_completions(arr, into, {wb: False, wb_fua: True})
    # C events per disk: 3 + 4 + 1 + 2 = 10
    assert into[wb] == 10 - 1 - 2      # the commit and both FUA pieces went through the flush sequence
    assert into[wb_fua] == 10 - 1      # only the commit (PREFLUSH); FUA is done by the disk
    assert into[wt] == 10              # no volatile cache: no flush sequence
    # split across batches, the same sums
    into2: dict[int, int] = {}
    for lo in range(0, len(arr), 5):
        count_completions(arr[lo:lo + 5], into2, {wb: False, wb_fua: True})
    assert into2 == into


def test_completions_warnings_tell_misses_from_edges_and_removed_disks() -> None:
    from ioscope.engines.recording.recorder import completions_warnings
    check = {
        "7,1": {"name": "loop1", "kernel": 320, "recorded": 316, "attached": {"kernel": 316, "recorded": 316},
                "edges": {"kernel": 4, "recorded": 0}},
        "7,2": {"name": "loop2", "kernel": 320, "recorded": 317, "attached": {"kernel": 318, "recorded": 317},
                "edges": {"kernel": 2, "recorded": 0}},
        "7,3": {"name": "loop3", "kernel": None, "recorded": 103, "removed": True},
        "7,4": {"name": "loop4", "kernel": 11, "recorded": 10},   # a capture of an earlier version: no window
        "7,5": {"name": "loop5", "kernel": 9, "recorded": 9, "attached": {"kernel": 9, "recorded": 9},
                "edges": {"kernel": 0, "recorded": 0}},
    }
    lines = completions_warnings("record", check)
    assert len(lines) == 4
    assert lines[0].startswith("ioscope record: note: loop1 (7,1): 4 I/Os completed while the programs were being "
                               "attached or detached (0 of their completions seen)")
    assert "loop2 (7,2) completed 318 I/Os while every program ran (/proc/diskstats) but 317 completions were " \
           "seen: 1 was not" in lines[1] and "warning" in lines[1]
    assert "loop3 (7,3) was removed while tracing" in lines[2] and "103 were seen" in lines[2]
    assert "loop4 (7,4) completed 11 I/Os while tracing (/proc/diskstats) but 10 completions were seen" in lines[3]


@pytest.mark.parametrize("names, pid, hooks, filtered", [
    ([], False, None, False),
    (["complete"], False, {"rq_complete", "bio_complete", "task_rename"}, False),
    (["issue"], False, {"rq_issue", "task_rename"}, False),
    (["issue", "complete"], True, {"rq_issue", "rq_complete", "bio_complete", "task_rename", "bio_queue", "split"},
     True),
    (["queue"], True, {"bio_queue", "getrq", "rq_insert", "bio_backmerge", "bio_frontmerge", "rq_merge", "plug",
                       "unplug", "bio_remap", "rq_remap", "task_rename", "split"}, True),
    (["read"], False, None, True),
    (["write", "complete"], False, None, True),
])
def test_mask_hooks(names: list[str], pid: bool, hooks: set[str] | None, filtered: bool) -> None:
    """Action categories attach only their programs; a read/write-type category needs them all."""
    from ioscope.engines.recording.recorder import mask_hooks, mask_names
    from ioscope.tools.parse.blkparse import parse_mask
    mask = parse_mask(names, None)
    got, filt = mask_hooks(mask, pid)
    assert set(got) == (hooks if hooks is not None else set(HOOKS)) and filt is filtered
    assert mask_names(mask) == (names or mask_names(0xFFFF))


def test_report_says_what_a_masked_capture_lacks() -> None:
    from ioscope.capture.events import action_mask_note
    assert action_mask_note("c", None) is None and action_mask_note("c", {"all": True, "names": []}) is None
    assert action_mask_note("c", {"all": False, "names": ["queue"]}) == (
        "c was recorded with -a queue: it holds only Q G I M F P U A events; I2D, D2C, Q2D, Q2C need others: "
        "their tables are empty, not zero")
    assert action_mask_note("c", {"all": False, "names": ["read", "complete"]}) == (
        "c was recorded with -a read,complete: it holds only the events of read I/O and every C event; the "
        "numbers are about those alone")
