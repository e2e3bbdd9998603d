"""One reader of `ioscope demo readahead`, run as its own process (python -m ioscope.tools.demo.reader).

Waits for the start time, reads its file sequentially with SIZE-byte reads until the stop time
(at each end of file it drops the file from the page cache and starts again, so every byte keeps
coming from the device), then prints the bytes it read: the count the demo puts beside ioscope's.
"""

from __future__ import annotations

import os
import sys
import time


def read_until(path: str, size: int, start: float, stop: float) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        while time.time() < start:
            time.sleep(0.001)
        total = 0
        while time.time() < stop:
            b = os.read(fd, size)
            if not b:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.lseek(fd, 0, os.SEEK_SET)
                continue
            total += len(b)
        return total
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    path, size, start, stop = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    print(read_until(path, size, start, stop), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
