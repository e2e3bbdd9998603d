"""ioscope.capture._tracecore: the sequential loops of the offline tools, in C (sources: tracecore/*.c)."""

from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

Events = npt.NDArray[np.void]     # EVENT records (events.py), C-contiguous
Int32s = npt.NDArray[np.int32]

REC_SIZE: int
BLAT_SIZE: int
IOREC_SIZE: int

# --------------------------------------------------------------------------- scan.c
def scan_blktrace(buf: bytes | bytearray | memoryview, swap: bool, final: bool) -> tuple[bytes, int, int, int, int]:
    """(record offsets as int64 bytes, where parsing stopped, status 0 ok / 1 cut / 2 bad magic / 3 bad
    version, offset of the problem, bad value)."""

def gather_blktrace(buf: bytes | bytearray | memoryview, offsets: npt.NDArray[np.int64], swap: bool) -> bytes:
    """64 bytes per record: its 48-byte header, then its first 16 payload bytes (zeros past the end)."""

# --------------------------------------------------------------------------- blkparse.c
def format_blkparse(events: Events, *, rel: npt.NDArray[np.int64], seq: npt.NDArray[np.uint32], devidx: Int32s,
                    pidx: Int32s, names: list[bytes | None], mask: int, cpustats: npt.NDArray[np.int64],
                    devstats: npt.NDArray[np.int64], text: bool = True, cgroups: bool = False,
                    cpucol: Int32s | None = None) -> bytes:
    """blkparse's default line of each event (in the order given; no process notes), each one's counters
    updated in place: cpustats[devidx][col] (int64, [blocks][columns][29]; col is the event's CPU, or
    cpucol[i] when given: a column per CPU seen, so that a CPU number in a file sizes nothing) and
    devstats[devidx] (int64, [blocks][7]). rel: times from blkparse's time zero; pidx: the process name in
    names (None: the pid has no name, printed "(null)"); mask: category bits printed (others only
    counted); cgroups: a Q that carries its bio's cgroup (EV_CGROUP) with the id before its action
    (LOW32,HIGH32 in hex, parse -G)."""

# --------------------------------------------------------------------------- pack.c
def pack_events(rows: bytes | bytearray | memoryview | npt.NDArray[Any],
                order: npt.NDArray[np.int64] | None = ...) -> tuple[list[bytes], int, int, bytes]:
    """The 13 Arrow columns of EVENT rows (in order's order), their sum and weighted sum (checksum), and the
    count of rows per action code (32 x u64)."""

# --------------------------------------------------------------------------- pairing.c, bttsim.c
class SeekInfo(TypedDict):
    n: int
    total: float
    btt_median: int
    median: int
    modes: list[int]
    nmodes: int
    most: int
    distinct: int

class IoscopeDevice(TypedDict):
    idx: int
    start_time: int
    end_time: int
    dup_q: int
    culled: int
    overlap_q: int
    split_pieces: int
    split_bios: int
    btt_diff_split: int
    btt_diff_range: int
    btt_diff_other: int
    btt_g_split: int
    btt_g_range: int
    btt_g_other: int
    inflight: int
    inflight_issued: int

AvgTuple = tuple[int, int, int, int]   # btt's avg_info: n, min, max, total (ns)

class BttDevice(TypedDict):
    idx: int
    start_time: int
    end_time: int
    n_qs: int
    n_ds: int
    t_act_q: int
    avg: list[AvgTuple]                # in btt.BTT_AVGS's order
    plugged: int
    last_plug: float
    plugged_s: float
    nplugs: int
    nplugs_t: int
    nios_up: int
    nios_upt: int
    q2d_hist: list[int]
    seek_q2q: SeekInfo
    seek_d2d: SeekInfo
    live: tuple[int, int, int]
    in_flight: int
    split_events: int
    split_bios: int
    split_never_completed: int
    q_replaced: int
    remaps_elsewhere: int
    qranges: bytes                     # btt's activity ranges: (start, end) u64 pairs of ns
    cranges: bytes
    rstat: tuple[int, int, int]        # the open second of its iops/mbps files: (second or -1, ios, blocks)
    sps_q2q: tuple[int, int, float]    # its open buckets of -m seeks per second: (first seek's time, seeks, value)
    sps_d2d: tuple[int, int, float]
    unplug_hist: list[int]
    plat: list[tuple[int, float, float]]
    iostat: tuple[int, int, int, int, int, int, int, int, float, float]

class BttResults(TypedDict):
    iostat_last_stamp: int             # btt's -I: the last record's time stamp (ns from the time zero)
    devices: list[BttDevice]
    # (name id, or -pid-1 for btt's pid%09u; averages; activity ranges of its Qs and Cs)
    processes: list[tuple[int, list[AvgTuple], bytes, bytes]]
    all: list[AvgTuple]
    live: tuple[int, int, int]
    qranges: bytes
    cranges: bytes
    rstat: tuple[int, int, int]
    qhist: bytes                       # btt's request-size histograms: N_HIST_BKTS u64 counts
    dhist: bytes

class Core:
    """report's pairing: ioscope's view on the pairing engine (tracecore/bios.c), and btt's view of the same
    events (tracecore/bttsim.c), compared event by event."""

    def __init__(self) -> None: ...
    def feed(self, events: Events, *, dev: Int32s, auxdev: Int32s, proc: Int32s, bdev: Int32s | None = None,
             name: Int32s | None = None) -> tuple[bytes, ...]:
        """One chunk, in the order read. dev: each event's device (dense index, -1: skip), auxdev: a remap's
        device_from, proc: its process (ioscope's naming); bdev: the record's own device for btt's view
        (default dev), name: btt's name id of a process note, or of a pid's name for its first event
        (-1: none). Returns the records of ioscope's view, one bytes object per kind."""
    def set_remapper(self, idx: int, flag: bool) -> None: ...
    def set_time_zero(self, tz: int) -> None: ...
    def devices(self) -> list[IoscopeDevice]: ...
    def btt(self) -> BttResults: ...
    def set_io_records(self, flag: bool) -> None: ...
    def set_seeks(self, flag: bool) -> None: ...
    def set_btt(self, flag: bool) -> None: ...
    def set_btt_latencies(self, flag: bool) -> None: ...
    def set_btt_files(self, flag: bool, range_delta: float = 0.1) -> None: ...
    def set_btt_window(self, t_start: float, t_end: float) -> None: ...
    def set_btt_iostat(self, on: bool, interval: int) -> None: ...
    def set_btt_extra(self, aqd: bool, seeks: bool, sps: bool, bno: bool, per_io: bool = False,
                      per_io_times: bool = False, plat_freq: float = 0.0) -> None: ...
    def take_btt_latencies(self) -> bytes: ...
    def take_io(self) -> bytes: ...
    def io_flush(self) -> None: ...
    def min_ord(self) -> int: ...

# --------------------------------------------------------------------------- bios.c
BIOREC_SIZE: int

class Bios:
    """The pairing engine (the kernel agg object's rules; engines/pairing/bios.py): a record per completed bio."""

    unpaired: int
    last_ts: int
    def __init__(self) -> None: ...
    def feed(self, events: Events) -> bytes: ...
    def set_machine(self, dev: int, fua: bool) -> None: ...
    def expire(self, before_ns: int) -> int: ...
    def in_flight(self) -> int: ...
    def requests(self, dev: int) -> int: ...
