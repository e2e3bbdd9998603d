"""ioscope exporter, live: bench/exporter_soak.py's machinery for one minute, with strict bounds.

The soak itself (20 minutes, docs/exporter.md "Soak") judges flatness between quarters; a minute is too
short for that (the first quarter is the warm-up), but long enough for what must hold at every moment:
fio at full rate on a tmpfs loop device, ~1,000 short-lived processes under up to 2,000 names in 40
cgroups, scrapers coming and going (keep-alive scrapes, scrapes cut off with a reset or closed unread),
and at each of the 4 samples (every 15 s):

- descriptors: at most those it had before any traffic, plus one connection per scraper and the
  sampler's, plus 2 for a collection in flight (its own metrics read /proc/self/stat and list
  /proc/self/fd). A descriptor leaked per cut-off scrape (about 100 of them a minute) or per expired
  series would be far past it.
- series: at most what the options allow (2N + 1 process and cgroup keys, each with its series), and
  the process and cgroup series each within their own part of it.

And then: no scrape failed, the exporter stopped with 0 and nothing on stderr, and the loop device and
cgroups are gone."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import exporter_soak as soak

pytestmark = pytest.mark.usefixtures("live")

SCRAPERS = 4
IN_FLIGHT_FILES = 2  # a collection's own /proc/self/stat and /proc/self/fd


def test_a_minute_of_soak_keeps_descriptors_and_series_bounded() -> None:
    out = io.StringIO()
    r = soak.soak(minutes=1.0, every=15.0, scraper_count=SCRAPERS, out=out)
    table = out.getvalue()
    assert len(r.samples) == 4, table
    assert r.exit_status == 0 and r.stderr == "", (r.exit_status, r.stderr)
    assert sum(s.failed for s in r.samples) == 0, r.errors[:5]
    assert r.samples[-1].procs >= 500, table  # the churn ran (about 20 a second here)
    assert sum(s.scrapes for s in r.samples) >= 40 and sum(s.cut for s in r.samples) >= 20, table
    fd_bound = r.base_fds + SCRAPERS + 1 + IN_FLIGHT_FILES
    assert max(s.fds for s in r.samples) <= fd_bound, (fd_bound, table)
    assert max(s.series for s in r.samples) <= r.bound, table
    assert max(s.process_series for s in r.samples) <= soak.PROCESS_SERIES_PER_KEY * (2 * soak.PER_PROCESS + 1)
    assert max(s.cgroup_series for s in r.samples) <= soak.CGROUP_SERIES_PER_KEY * (2 * soak.PER_CGROUP + 1)
    assert min(s.process_series for s in r.samples) > 0 and min(s.cgroup_series for s in r.samples) > 0, table
    assert not Path(f"/sys/block/{r.disk}/loop/backing_file").exists() or "ioscope-loop-" not in \
        Path(f"/sys/block/{r.disk}/loop/backing_file").read_text()
    assert not r.cgroup_dir.exists()
