"""Fuzz target capture: an ioscope capture (Arrow IPC chunks, each checksummed; its header and end record,
with an import's file-set JSON, are not) through every offline reader and the store's own check."""

import contextlib
import io

import common

from ioscope.capture import store


def one(data: bytes) -> None:
    p = common.write("c.ioscope", data)
    common.readers(p, capture=True)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if store.main([p]) not in (0, 1):
            raise common.Finding("python -m ioscope.capture.store: exit not 0 or 1")


if __name__ == "__main__":
    common.run(one)
