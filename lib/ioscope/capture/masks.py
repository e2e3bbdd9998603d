"""blktrace's action categories by name (blkparse's and blktrace's -a NAME, -A HEX): one table for
record, parse and the recorder. No numpy here: command lines build their help from it."""

from __future__ import annotations

from ioscope.base.errors import UsageError

# blkparse's -a names: the category bits
MASKS = {"read": 1 << 0, "write": 1 << 1, "flush": 1 << 2, "sync": 1 << 3, "queue": 1 << 4, "requeue": 1 << 5,
         "issue": 1 << 6, "complete": 1 << 7, "fs": 1 << 8, "pc": 1 << 9, "notify": 1 << 10, "ahead": 1 << 11,
         "meta": 1 << 12, "discard": 1 << 13, "drv_data": 1 << 14, "fua": 1 << 15}


def parse_mask(names: list[str] | None, hexmask: str | None) -> int:
    mask = 0
    for n in names or []:
        for part in n.split(","):
            bit = MASKS.get(part.strip().lower().removeprefix("blk_tc_"))
            if bit is None:
                raise UsageError(f"invalid action mask '{part}'", f"choose from {', '.join(MASKS)}")
            mask |= bit
    if hexmask is not None:
        try:
            mask = int(hexmask, 16)
        except ValueError:
            raise UsageError(f"invalid action mask '{hexmask}'", "give a hexadecimal category mask") from None
        if not 1 <= mask < (1 << 16):
            raise UsageError(f"invalid action mask '{hexmask}'", "the mask has 16 bits")
    return mask or 0xFFFF
