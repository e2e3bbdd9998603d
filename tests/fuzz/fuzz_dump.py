"""Fuzz target dump: a blkparse -d dump (one stream of every CPU's records) through every offline reader."""

import common


def one(data: bytes) -> None:
    common.readers(common.write("trace.dump", data), capture=False)


if __name__ == "__main__":
    common.run(one)
