"""btt's files besides its averages, each line as btt writes it, from btt's own pairing (engines/pairing/btt.py,
the rows bttsim.c keeps): the per-I/O latency files (-l/-q/-z), its messages (NAME.msg, or stdout), the
per-second counts of completions (MAJ,MIN_iops_fp.dat, MAJ,MIN_mbps_fp.dat, sys_*), the activity ranges
(NAME.dat, or stdout after the averages), the request-size histograms (NAME_qhist.dat, NAME_dhist.dat) and the
files of btt's other options (-Q, -s, -m, -B, -u, -p, -P, -L, -I).
The numbers come from btt's rules in C; this module only formats them, in btt's formats."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ioscope.base.devices import kdev_split
from ioscope.engines.pairing import btt
from ioscope.engines.pairing.bttavg import dev_label

LAT_SUFFIX = {btt.BL_D2C: "d2c", btt.BL_Q2C: "q2c", btt.BL_Q2D: "q2d"}
Opener = Callable[[str], IO[str]]


def dip_name(dev: int) -> str:
    """btt's name for a device without a device map (-M): "MAJ,MIN"."""
    ma, mi = kdev_split(dev)
    return f"{ma},{mi}"


def latency_lines(t: npt.NDArray[Any], v: npt.NDArray[Any]) -> str:
    """btt's latency lines for rows of ns: "%lf %lf\\n" of each as a double divided by 1e9 (Python's fixed
    format rounds the double's exact value to 6 places, as glibc's printf does)."""
    ts = (t.astype(np.float64) / 1.0e9).tolist()
    vs = (v.astype(np.float64) / 1.0e9).tolist()
    return "".join(f"{a:f} {b:f}\n" for a, b in zip(ts, vs))


def bit_times(t: npt.NDArray[Any]) -> list[float]:
    """btt's BIT_TIME() of times in ns: whole seconds and the rest converted apart, as doubles."""
    t = t.astype(np.uint64)
    sec = (t // np.uint64(1_000_000_000)).astype(np.float64)
    out: list[float] = (sec + (t % np.uint64(1_000_000_000)).astype(np.float64) / 1.0e9).tolist()
    return out


def aqd_lines(t: npt.NDArray[Any], depth: npt.NDArray[Any], issue: npt.NDArray[Any]) -> str:
    """btt's -Q lines: two per change of a device's active queue depth, "%lf %d" before and after it (up at a
    D, down at a C)."""
    after = depth.astype(np.int64) + np.where(issue != 0, 1, -1)
    return "".join(f"{a:f} {b}\n{a:f} {c}\n" for a, b, c in zip(bit_times(t), depth.astype(np.int64).tolist(),
                                                               after.tolist()))


def seek_lines(t: npt.NDArray[Any], dist: npt.NDArray[Any], read: npt.NDArray[Any]) -> str:
    """btt's -s lines: "%15.9lf %13lld %c", the seek's time, its signed distance in sectors, r or w."""
    return "".join(f"{a:15.9f} {b:13d} {'r' if c else 'w'}\n"
                   for a, b, c in zip(bit_times(t), dist.astype(np.int64).tolist(), read.tolist()))


def bno_lines(t: npt.NDArray[Any], start: npt.NDArray[Any], end: npt.NDArray[Any]) -> str:
    """btt's -B lines: "%15.9lf %lld %lld", a D's time and its first and end block."""
    return "".join(f"{a:15.9f} {b} {c}\n" for a, b, c in zip(bit_times(t), start.astype(np.int64).tolist(),
                                                             end.astype(np.int64).tolist()))


def _dir_lines(kind: int, r: npt.NDArray[np.void]) -> str:
    """The lines of a -B (BL_BNO) or -s (BL_SEEK_*) file from its rows."""
    if kind == btt.BL_BNO:
        return bno_lines(r["t"], r["v"], r["w"])
    return seek_lines(r["t"], r["v"].view(np.int64), (r["kind"] & btt.BL_READ) != 0)


PIO_CHAR = {btt.BL_PIO_Q: "Q", btt.BL_PIO_G: "G", btt.BL_PIO_I: "I", btt.BL_PIO_M: "M", btt.BL_PIO_D: "D",
            btt.BL_PIO_C: "C"}
PIO_END = "-" * 41 + "\n"


def pio_lines(rows: list[tuple[int, int, int, int, int]], dev_of: list[int],
              q: tuple[int, int]) -> tuple[str, tuple[int, int]]:
    """btt's -p lines of rows (kind, device index, t, v, w) in order: a Q's track "MAJ,MIN: " then a line
    "%5d.%09lu %c %10llu+%-4u" per step (the Q's sector and sectors for Q, G, I, M; the D's for D, the C's for
    C; the steps after the Q indented by 9 spaces), an empty line after the C, and a line of 41 '-' at the end
    of each C. q: the last Q's (sector, sectors), carried from one chunk to the next; returned updated."""
    out = []
    for kind, di, t, v, w in rows:
        if kind == btt.BL_PIO_END:
            out.append(PIO_END)
            continue
        if kind == btt.BL_PIO_Q:
            ma, mi = kdev_split(dev_of[di])
            out.append(f"{ma:3d},{mi:<3d}: ")
            q = (v, w)
        else:
            out.append("         ")
            if kind not in (btt.BL_PIO_D, btt.BL_PIO_C):
                v, w = q
        out.append(f"{t // 1_000_000_000:5d}.{t % 1_000_000_000:09d} {PIO_CHAR[kind]} {v:10d}+{w:<4d}\n")
        if kind == btt.BL_PIO_C:
            out.append("\n")
    return "".join(out), q


def pit_time(t: int) -> str:
    """A time of btt's -P files: "%d.%09lu" of the seconds as a C int (btt's (int)SECONDS(): the D time of a C
    that issued nothing, (u64)-1, prints as 1266874889.709551615) and the nanoseconds."""
    sec = (t // 1_000_000_000) & 0xFFFFFFFF
    return f"{sec - (1 << 32) if sec >= 1 << 31 else sec}.{t % 1_000_000_000:09d}"


def pit_lines(rows: list[tuple[int, int, int, int, int]]) -> str:
    """btt's -P lines (MAJ,MIN_pit.dat) of one device's rows: per C, the time of each Q it completes followed by a
    space, then "| D-time | C-time"."""
    return "".join(f"{pit_time(t)} " if kind == btt.BL_PIT_Q else f"| {pit_time(v)} | {pit_time(t)}\n"
                   for kind, _di, t, v, _w in rows)


def plat_line(x: float, y: float) -> str:
    """A line of btt's -L files: "%lf %lf", a period's middle time stamp and its mean latency."""
    return f"{x:f} {y:f}\n"


IOSTAT_HDR = ("Device:       rrqm/s   wrqm/s     r/s     w/s    rsec/s    wsec/s     rkB/s     wkB/s avgrq-sz "
              "avgqu-sz   await   svctm  %util   Stamp\n")


def iostat_dev(dev: int) -> str:
    """btt's device column of -I: "(%3d,%3d)" cut to 10 characters (its snprintf of 11 bytes)."""
    ma, mi = kdev_split(dev)
    return f"({ma:3d},{mi:3d})"[:10]


class IostatTotal:
    """btt's sums of one dump's device lines (its struct stats_t), for the TOTAL line of 2 devices or more."""

    def __init__(self) -> None:
        self.n = 0.0
        self.rqm = [0.0, 0.0]
        self.ios = [0.0, 0.0]
        self.sec = [0.0, 0.0]
        self.avgrq = self.avgqu = self.wait = self.svctm = self.util = 0.0

    def line(self, tail: str) -> str:
        """btt's TOTAL line: the sums of the rates in index order (writes under rrqm/s, r/s, rsec/s, rkB/s: btt's
        columns) and the means of the rest."""
        if self.n < 2.0:
            return ""
        n = self.n
        return (f"{'TOTAL':<11s} {self.rqm[0]:8.2f} {self.rqm[1]:8.2f} {self.ios[0]:7.2f} {self.ios[1]:7.2f} "
                f"{self.sec[0]:9.2f} {self.sec[1]:9.2f} {self.sec[0] / 2.0:9.2f} {self.sec[1] / 2.0:9.2f} "
                f"{self.avgrq / n:8.2f} {self.avgqu / n:8.2f} {self.wait / n:7.2f} {self.svctm / n:7.2f} "
                f"{self.util / n:6.2f}{tail}")


def iostat_line(dev: int, dt: float, c: tuple[int, int, int, int, int, int, int, int, float, float], tail: str,
                total: IostatTotal, reset: bool) -> str:
    """A device's line of btt's -I file from its counters c (merges written, read; ios; sectors; wait, svctm ns;
    tot_qusz, idle_time s) over dt seconds: btt's columns (reads first), tail its "   TOTAL" or time stamp. Adds
    it to total as btt does: after an interval's reset (reset: the counters summed as 0), its means not."""
    rqm0, rqm1, ios0, ios1, sec0, sec1, wait, svctm, qusz, idle = c
    nios = float(ios0 + ios1)
    nrqm = float(rqm0 + rqm1)
    if nios > 0.0:
        avgrq = float(sec0 + sec1) / nios
        svc = 1000.0 * (svctm / 1.0e9) / nios
    else:
        avgrq = svc = 0.0
    aw = 1000.0 * (wait / 1.0e9) / (nios + nrqm) if nios + nrqm > 0.0 else 0.0
    util = 100.0 * (1.0 - idle / dt) if idle <= dt else 0.0
    out = (f"{iostat_dev(dev):<11s} {rqm1 / dt:8.2f} {rqm0 / dt:8.2f} {ios1 / dt:7.2f} {ios0 / dt:7.2f} "
           f"{sec1 / dt:9.2f} {sec0 / dt:9.2f} {(sec1 // 2) / dt:9.2f} {(sec0 // 2) / dt:9.2f} {avgrq:8.2f} "
           f"{qusz / dt:8.2f} {aw:7.2f} {svc:7.2f} {util:6.2f}{tail}")
    if reset:
        rqm0 = rqm1 = ios0 = ios1 = sec0 = sec1 = 0
        qusz = 0.0
    total.n += 1.0
    for i, (r, o, s) in enumerate(((rqm0, ios0, sec0), (rqm1, ios1, sec1))):
        total.rqm[i] += r / dt
        total.ios[i] += o / dt
        total.sec[i] += s / dt
    total.avgrq += avgrq
    total.avgqu += qusz / dt
    total.wait += aw
    total.svctm += svc
    total.util += util
    return out


def sps_line(t_ns: int, value: float) -> str:
    """A line of btt's -m file: "%15.9lf %.2lf", a bucket's first seek and its seeks per second."""
    return f"{bit_times(np.array([t_ns]))[0]:15.9f} {value:.2f}\n"


class SharedPath:
    """A file btt opens twice (-m: a device's Q2Q and D2D seek streams both open NAME_MAJ,MIN.dat with "w"),
    as the file system ends up with it: each stdio stream writes its own bytes from offset 0, a block of the
    file's st_blksize when its buffer overflows and the rest when closed (the later write of a byte wins),
    and btt removes the file when it is empty right after one of the closes (a stream closed later then
    writes into the removed file)."""

    def __init__(self, path: str, opener: Opener, nstreams: int = 2) -> None:
        self.path = path
        self.f = opener(path)
        self.block = os.fstat(self.f.fileno()).st_blksize or 8192
        self.image = bytearray()
        self.bufs = [bytearray() for _ in range(nstreams)]
        self.pos = [0] * nstreams
        self.removed = False

    def _put(self, k: int, data: bytes | bytearray) -> None:
        if not self.removed:
            at = self.pos[k]
            self.image[at:at + len(data)] = data
        self.pos[k] += len(data)

    def write(self, k: int, text: str) -> None:
        buf = self.bufs[k]
        buf += text.encode()
        while len(buf) > self.block:
            self._put(k, buf[:self.block])
            del buf[:self.block]

    def close_stream(self, k: int) -> None:
        self._put(k, self.bufs[k])
        self.bufs[k] = bytearray()
        if not self.removed and not self.image:
            self.removed = True

    def close(self) -> None:
        """Write what the file holds (or remove it)."""
        if self.removed:
            self.f.close()
            os.unlink(self.path)
        else:
            self.f.write(self.image.decode())
            self.f.close()


def unplug_hist_text(counts: list[int]) -> str:
    """btt's -u file (NAME_MAJ,MIN.dat): a line "%d %d" per bucket of 5 requests unplugged, its index and its
    unplugs."""
    return "".join(f"{i} {n}\n" for i, n in enumerate(counts))


def msg_line(dev: int, t_ns: int, text: str) -> str:
    """A message as btt prints it: the device's label, the time as seconds.nanoseconds, the text."""
    return f"{dev_label(dev)} {t_ns // 1_000_000_000:5d}.{t_ns % 1_000_000_000:09d} {text}\n"


def rate_lines(sec: int, ios: int, nblks: int) -> tuple[str, str]:
    """One second's lines of the iops and mbps files: completions, and their blocks in MiB ("%lf")."""
    return f"{sec} {ios}\n", f"{sec} {nblks * 512.0 / (1024.0 * 1024.0):f}\n"


def hist_text(kind: str, counts: npt.NDArray[Any], title: bool) -> str:
    """NAME_qhist.dat (kind "Q", with btt's title) or NAME_dhist.dat ("D"): a line per bucket of 1 to 1024
    blocks, then the bucket of more."""
    n = len(counts) - 1
    c = counts.tolist()
    head = "# BTT histogram data\n" if title else ""
    rows = "".join(f"{i + 1:4d} {c[i]}\n" for i in range(n))
    return f"{head}# {kind} buckets\n{rows}\n# {kind} bucket for > {n}\n{n:4d} {c[n]}\n"


def _range_lines(r: npt.NDArray[np.uint64], base: np.float32) -> Iterator[str]:
    """A range as btt draws it: start at base, start and end at base + 0.4, end at base (a float's)."""
    limit = np.float32(float(base) + 0.4)
    b, lim = f"{float(base):5.1f}", f"{float(limit):5.1f}"
    for s, e in (r.astype(np.float64) / 1.0e9).tolist():
        yield f"{s:13.9f} {b}\n{s:13.9f} {lim}\n{e:13.9f} {lim}\n{e:13.9f} {b}\n"


def _regions(out: list[str], header: str, qraw: bytes, craw: bytes, base: np.float32) -> bool:
    q, c = btt.ranges(qraw), btt.ranges(craw)
    if not len(q) and not len(c):
        return False
    out.append(f"# {header:>16s} : q activity\n")
    out.extend(_range_lines(q, base))
    out.append("\n")
    out.append(f"# {header:>16s} : c activity\n")
    out.extend(_range_lines(c, np.float32(float(base) + 0.5)))
    out.append("\n")
    return True


def ranges_text(v: btt.BttView, n_devs: int | None = None) -> str:
    """btt's activity ranges (NAME.dat, or stdout after the averages): the system's, each device's when there
    are several (n_devs: how many btt set up, when v lists fewer: -D; a device without ranges takes no place),
    each process's (in btt's order; each takes a
    place), each kind of range drawn at its own height."""
    out = ["# Total System\n"]
    base = np.float32(0.0)
    if _regions(out, "Total System", v.qranges, v.cranges, base):
        base = np.float32(base + np.float32(1.0))
    if (len(v.devices) if n_devs is None else n_devs) > 1:   # btt: the devices it set up, whatever -D lists
        out.append("# Per device\n")
        for d in v.devices:
            if _regions(out, dip_name(d.dev), d.qranges, d.cranges, base):
                base = np.float32(base + np.float32(1.0))
    out.append("# Per process\n")
    for (name, _avgs), (q, c) in zip(v.processes, v.proc_ranges):
        _regions(out, name, q, c, base)
        base = np.float32(base + np.float32(1.0))
    return "".join(out)


class RowFiles:
    """The files btt writes as it reads (btt.Btt's on_btt_rows): the -l/-q/-z latency files (one per kind
    and device, opened at its first row), the messages (to msgs), and the per-second iops/mbps lines (the
    system's files opened first, a device's at its first record, as btt opens them). Memory does not
    grow with the trace."""

    def __init__(self, opener: Opener, lat_names: dict[int, str], msgs: IO[str],
                 extra: dict[str, str] | None = None) -> None:
        """extra: btt's NAMEs of its other files, by option: "Q" (NAME_MAJ,MIN_aqd.dat), "s"
        (NAME_MAJ,MIN_q2q_r.dat, _q2q_w, _q2q_c, _d2d_r ...), "m" (NAME_MAJ,MIN.dat), "B" (NAME_MAJ,MIN_r.dat,
        _w, _c), "p" (the file NAME itself: btt's per-I/O tracks), "P" (btt's MAJ,MIN_pit.dat: btt ignores its NAME),
        "L" (MAJ,MIN_q2d_plat.dat, _q2c_plat, _d2c_plat: the period is Btt's plat_freq), "I" (the file NAME
        itself: btt's iostat, its intervals Btt's btt_iostat)."""
        self.open = opener
        self.lat_names = lat_names        # BL_* -> btt's NAME
        self.extra = extra or {}
        self.msgs = msgs
        self.files: dict[tuple[int, int], IO[str]] = {}
        self.named: dict[str, IO[str]] = {}
        self.sps: dict[int, SharedPath] = {}
        self.pio_q = (0, 0)   # -p: the last Q's sector and sectors
        self.ios_acc: list[int] = []   # -I: the counters of the device being read, its dump's stamp and start
        self.ios_stamp = self.ios_start = 0
        self.ios_total = IostatTotal()
        if "I" in self.extra:   # btt writes its header when it starts
            self._named(self.extra["I"]).write(IOSTAT_HDR)
        self.rates: dict[int, tuple[IO[str], IO[str]]] = {}
        self._rate_files(-1)

    def _rate_files(self, dev: int) -> tuple[IO[str], IO[str]]:
        f = self.rates.get(dev)
        if f is None:
            nm = "sys" if dev < 0 else dip_name(dev)
            f = self.rates[dev] = (self.open(f"{nm}_iops_fp.dat"), self.open(f"{nm}_mbps_fp.dat"))
        return f

    def _lat_file(self, kind: int, dev: int) -> IO[str]:
        f = self.files.get((kind, dev))
        if f is None:
            f = self.files[(kind, dev)] = self.open(f"{self.lat_names[kind]}_{dip_name(dev)}_{LAT_SUFFIX[kind]}.dat")
        return f

    def _named(self, name: str) -> IO[str]:
        f = self.named.get(name)
        if f is None:
            f = self.named[name] = self.open(name)
        return f

    def _plat(self, dev: int, lat: int) -> IO[str]:
        return self._named(f"{dip_name(dev)}_{LAT_SUFFIX[lat]}_plat.dat")

    def _iostat_rows(self, rows: list[tuple[int, int, int, int, int]], dev_of: list[int]) -> None:
        """btt's interval lines of -I: five rows of counters a device, then the end of the dump."""
        out = []
        for kind, di, t, v, w in rows:
            if kind == btt.BL_IOS_END:
                out.append(self.ios_total.line(f"{t / 1.0e9:8.2f}\n"))
                out.append("\n")
                self.ios_total = IostatTotal()
                continue
            self.ios_acc.extend((v, w))
            if kind == btt.BL_IOS_1:
                self.ios_stamp = t
            elif kind == btt.BL_IOS_2:
                self.ios_start = t
            elif kind == btt.BL_IOS_5:
                a = self.ios_acc
                qusz, idle = np.array(a[8:10], dtype=np.uint64).view(np.float64).tolist()
                c = (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], qusz, idle)
                dt = (self.ios_stamp - self.ios_start) / 1.0e9
                out.append(iostat_line(dev_of[di], dt, c, f"{self.ios_stamp / 1.0e9:8.2f}\n", self.ios_total, True))
                self.ios_acc = []
        self._named(self.extra["I"]).write("".join(out))

    def _sps(self, dev: int) -> SharedPath:
        f = self.sps.get(dev)
        if f is None:
            f = self.sps[dev] = SharedPath(f"{self.extra['m']}_{dip_name(dev)}.dat", self.open)
        return f

    def _extra_rows(self, rows: npt.NDArray[np.void], dev_of: list[int]) -> None:
        """The rows of the -Q, -s, -B files (a file per device, stream and direction, written a chunk at a
        time) and of the -m files (in order: two streams share one file)."""
        kinds, devs = rows["kind"], rows["dev"]
        base = kinds & ~btt.BL_READ
        read = (kinds & btt.BL_READ) != 0
        for kind, opt in ((btt.BL_AQD, "Q"), (btt.BL_SEEK_Q, "s"), (btt.BL_SEEK_D, "s"), (btt.BL_BNO, "B")):
            mk = base == kind
            if opt not in self.extra or not mk.any():
                continue
            for di in np.unique(devs[mk]).tolist():
                r = rows[mk & (devs == di)]
                rd = read[mk & (devs == di)]
                name = f"{self.extra[opt]}_{dip_name(dev_of[di])}"
                if kind == btt.BL_AQD:
                    self._named(f"{name}_aqd.dat").write(aqd_lines(r["t"], r["v"], r["w"]))
                    continue
                name = f"{name}_" if kind == btt.BL_BNO else f"{name}_{'q2q' if kind == btt.BL_SEEK_Q else 'd2d'}_"
                for suffix, m in (("r", rd), ("w", ~rd), ("c", None)):
                    sel = r if m is None else r[m]
                    if len(sel):
                        self._named(f"{name}{suffix}.dat").write(_dir_lines(kind, sel))
        if "p" in self.extra:
            mp = (kinds >= btt.BL_PIO_Q) & (kinds <= btt.BL_PIO_END)
            if mp.any():
                text, self.pio_q = pio_lines(rows[mp].tolist(), dev_of, self.pio_q)
                self._named(self.extra["p"]).write(text)
        if "P" in self.extra:
            mt = (kinds == btt.BL_PIT_Q) | (kinds == btt.BL_PIT_END)
            for di in np.unique(devs[mt]).tolist():
                self._named(f"{dip_name(dev_of[di])}_pit.dat").write(pit_lines(rows[mt & (devs == di)].tolist()))
        if "L" in self.extra:
            mpl = (kinds >= btt.BL_PLAT) & (kinds <= btt.BL_PLAT + 2)
            if mpl.any():
                for kind, di, t, v, _w in rows[mpl].tolist():
                    x, y = np.array([t, v], dtype=np.uint64).view(np.float64).tolist()
                    self._plat(dev_of[di], kind - btt.BL_PLAT).write(plat_line(x, y))
        if "I" in self.extra:
            mi = (kinds >= btt.BL_IOS_1) & (kinds <= btt.BL_IOS_END)
            if mi.any():
                self._iostat_rows(rows[mi].tolist(), dev_of)
        ms = (base == btt.BL_SPS_Q) | (base == btt.BL_SPS_D)
        if "m" in self.extra and ms.any():
            for kind, di, t, _v, w in rows[ms].tolist():
                value = float(np.array([w], dtype=np.uint64).view(np.float64)[0])
                self._sps(dev_of[di]).write(kind == btt.BL_SPS_Q, sps_line(t, value))

    def __call__(self, rows: npt.NDArray[np.void], dev_of: list[int], texts: dict[int, str]) -> None:
        if self.extra:
            self._extra_rows(rows, dev_of)
        kinds, devs = rows["kind"], rows["dev"]
        for kind in self.lat_names:
            mk = kinds == kind
            if not mk.any():
                continue
            for di in np.unique(devs[mk]).tolist():
                m = mk & (devs == di)
                self._lat_file(kind, dev_of[di]).write(latency_lines(rows["t"][m], rows["v"][m]))
        other = (kinds == btt.BL_MSG) | (kinds == btt.BL_RATE)
        if not other.any():
            return
        for r in rows[other].tolist():
            kind, di, t, v, w = r
            if kind == btt.BL_MSG:
                self.msgs.write(msg_line(dev_of[di], t, texts.get(v, "")))
            else:
                iops, mbps = self._rate_files(-1 if di < 0 else dev_of[di])
                a, b = rate_lines(t, v, w)
                iops.write(a)
                mbps.write(b)

    def finish(self, v: btt.BttView) -> None:
        """Every device's and the system's last second (a device btt set up without a completion: -1 0), then
        close the files."""
        for d in v.devices:
            self._rate_files(d.dev)
        ends = {d.dev: d.rstat for d in v.devices}
        ends[-1] = v.rstat
        for dev, (iops, mbps) in self.rates.items():
            a, b = rate_lines(*ends[dev])
            iops.write(a)
            mbps.write(b)
        if "I" in self.extra:   # btt's last dump: the whole trace's counters, over the time to the last record
            out = ["\n", IOSTAT_HDR]
            total = IostatTotal()
            dt = v.iostat_last_stamp / 1.0e9
            for d in v.devices:
                out.append(iostat_line(d.dev, dt, d.iostat, f"{'TOTAL':>8s}\n", total, False))
            out.append(total.line(f"{'TOTAL':>8s}\n"))
            self._named(self.extra["I"]).write("".join(out))
        if "L" in self.extra:   # btt writes each kind's open period as it frees the device
            for d in v.devices:
                for lat, (n, x, y) in enumerate(d.plat):
                    if n:
                        self._plat(d.dev, lat).write(plat_line(x, y))
        if "P" in self.extra:   # btt opens a device's _pit.dat when it sets the device up and keeps it, even empty
            for d in v.devices:
                self._named(f"{dip_name(d.dev)}_pit.dat")
        if "m" in self.extra:   # btt frees each device's D2D stream then its Q2Q stream, writing their last
            for d in v.devices:   # buckets, then closes them in the order it opened them: D2D first
                for k, (t, n, value) in ((0, d.sps_d2d), (1, d.sps_q2q)):
                    if n:
                        self._sps(d.dev).write(k, sps_line(t, value))
                f = self.sps.get(d.dev)
                if f is not None:
                    f.close_stream(0)
                    f.close_stream(1)
        self.close()

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        for f in self.named.values():
            f.close()
        for sp in self.sps.values():
            sp.close()
        for a, b in self.rates.values():
            a.close()
            b.close()
        self.files, self.rates, self.named, self.sps = {}, {}, {}, {}
