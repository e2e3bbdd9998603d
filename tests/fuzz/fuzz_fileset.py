"""Fuzz target fileset: an import's file-set record (the capture end record's "blktrace_files" JSON, which
no checksum covers) as the input's JSON text, under the events of tests/traces/partition.blktrace.*: the
capture is written with it, then read by every offline reader."""

import json
import os

import common

from ioscope.capture import importer
from ioscope.capture.store import CaptureWriter

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "traces")
SETS = importer.read_sets(importer.expand_inputs([os.path.join(TRACES, "partition.blktrace.0")]))


def one(data: bytes) -> None:
    try:
        side = json.loads(data)
    except (ValueError, RecursionError):
        return
    p = common.path("f.ioscope")
    w = CaptureWriter(p, {"devices": {"7,1": {"major": 7, "minor": 1, "name": "partition"}}, "source": "blktrace",
                          "time_base": "blktrace", "clock": None, "start": None, "lost": {}})
    SETS.write(w)
    w.close({"imported_events": SETS.n_events, importer.SIDE_KEY: side, "end": None})
    common.readers(p, capture=True)


if __name__ == "__main__":
    common.run(one)
