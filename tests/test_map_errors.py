"""Failed map operations are counted by error in every tool (bpf/maperr.bpf.h, issue 19 item 4)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import numpy as np
import pytest

from ioscope.base.losses import Losses
from ioscope.engines.recording.recorder import NR_STATS, record_losses


def test_map_errors_explain_and_do_not_add_to_lost() -> None:
    lo = Losses({"hist_map_full": 3, "map_update_E2BIG": 3, "map_delete_ENOENT": 0}, frozenset({"hist_map_full"}))
    assert lo.lost == 3  # the loss is counted once, by its call site
    assert lo.describe() == "3 hist_map_full, map operations that failed: 3 update_E2BIG"
    assert lo.to_json()["lost_detail"]["map_update_E2BIG"] == 3


def test_record_losses_carry_map_errors_as_explanations() -> None:
    lo = record_losses(np.zeros((2, NR_STATS), np.uint64), 0, {"map_update_EBUSY": 2})
    assert lo.lost == 0 and lo.counters["map_update_EBUSY"] == 2
    assert "2 update_EBUSY" in lo.describe()


def test_a_full_map_is_counted_by_its_error(loopdev: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """lat -P with room for 2 processes' histograms and 5 processes doing I/O: the kernel refuses the
    3rd key onwards (E2BIG, a hash map at max_entries); lat counts the histograms it could not keep
    (hist_map_full) and says why (map_update_E2BIG), one each per refused update."""
    from ioscope.engines.latency import collector as lc

    monkeypatch.setattr(lc, "HIST_MAX_ENTRIES_PER_PID", 2)
    dev = loopdev(size_mb=16)
    col = lc.LatCollector(lc.LatOptions(disks=[dev.device], per_pid=True, timing="probes"))
    try:
        for _ in range(5):
            subprocess.run(["dd", f"if={dev.path}", "of=/dev/null", "bs=4k", "count=3", "iflag=direct"],
                           check=True, stderr=subprocess.DEVNULL)
        time.sleep(0.2)
        losses, _ = col.losses(since_last=False)
    finally:
        col.close()
    c = losses.counters
    assert c["hist_map_full"] >= 3 * 3  # 3 processes x 3 reads found no room (at least)
    assert c["map_update_E2BIG"] == c["hist_map_full"]
    assert sum(v for k, v in c.items() if k.startswith("map_") and k != "map_update_E2BIG") == 0
