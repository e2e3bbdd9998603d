"""Fuzz target bundle: a collect bundle (zstd frames of a tar: manifest, context JSON, the capture) through
the bundle reader and every offline reader of its capture."""

import common

from ioscope.capture import bundle


def one(data: bytes) -> None:
    p = common.write("b.ioscope", data)
    if bundle.is_bundle(p):
        res = bundle.read_bundle(p)
        res.problems()
    common.readers(p, capture=True)


if __name__ == "__main__":
    common.run(one)
