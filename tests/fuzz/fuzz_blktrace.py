"""Fuzz target blktrace: blktrace's per-CPU files (NAME.blktrace.0, .1, ...) through every offline reader.
The input is the files' bytes, split at each 'CPU|' marker into the next CPU's file."""

import common

SEP = b"CPU|"


def one(data: bytes) -> None:
    for cpu, part in enumerate(data.split(SEP)[:4]):
        common.write(f"t.blktrace.{cpu}", part)
    common.readers(common.path("t.blktrace.0"), capture=False)


if __name__ == "__main__":
    common.run(one)
