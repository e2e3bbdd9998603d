"""base/units.py, the one vocabulary of what an I/O count counts, and the timing designs' units."""

from __future__ import annotations

from ioscope.base import units
from ioscope.kernel.stamps import PROBES, STAMPS, io_unit


def test_says_and_json() -> None:
    assert units.says(units.BIOS) == "counts bios (as queued, before any split)"
    both = {"devices": units.REQUESTS, "processes": units.BIOS}
    assert units.says(both) == ("counts devices: requests (as dispatched to the driver, after split and merge: "
                                "/proc/diskstats' unit), processes: bios (as queued, before any split)")
    assert units.to_json(units.PIECES) == {"io_unit": "pieces"}
    assert units.to_json(both) == {"io_unit": both}


def test_timing_designs_count_their_unit() -> None:
    assert io_unit({"loop0": STAMPS, "vda": STAMPS}) == units.REQUESTS
    assert io_unit({"loop0": PROBES}) == units.PIECES
    assert io_unit({"loop0": "at queue"}) == units.BIOS   # agg's records made at queue
    assert io_unit({"loop0": STAMPS, "loop1": PROBES}) == {"loop0": units.REQUESTS, "loop1": units.PIECES}
    assert io_unit({}) == units.BIOS
