"""btt's files besides its averages, each line as btt writes it, from btt's own pairing (engines/pairing/btt.py,
the rows bttsim.c keeps): the per-I/O latency files (-l/-q/-z), its messages (NAME.msg, or stdout), the
per-second counts of completions (MAJ,MIN_iops_fp.dat, MAJ,MIN_mbps_fp.dat, sys_*), the activity ranges
(NAME.dat, or stdout after the averages) and the request-size histograms (NAME_qhist.dat, NAME_dhist.dat).
The numbers come from btt's rules in C; this module only formats them, in btt's formats."""

from __future__ import annotations

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


def ranges_text(v: btt.BttView) -> str:
    """btt's activity ranges (NAME.dat, or stdout after the averages): the system's, each device's when there
    are several (a device without ranges takes no place), each process's (in btt's order; each takes a
    place), each kind of range drawn at its own height."""
    out = ["# Total System\n"]
    base = np.float32(0.0)
    if _regions(out, "Total System", v.qranges, v.cranges, base):
        base = np.float32(base + np.float32(1.0))
    if len(v.devices) > 1:
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

    def __init__(self, opener: Opener, lat_names: dict[int, str], msgs: IO[str]) -> None:
        self.open = opener
        self.lat_names = lat_names        # BL_* -> btt's NAME
        self.msgs = msgs
        self.files: dict[tuple[int, int], IO[str]] = {}
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

    def __call__(self, rows: npt.NDArray[np.void], dev_of: list[int], texts: dict[int, str]) -> None:
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
        self.close()

    def close(self) -> None:
        for f in self.files.values():
            f.close()
        for a, b in self.rates.values():
            a.close()
            b.close()
        self.files, self.rates = {}, {}
