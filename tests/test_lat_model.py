"""lat's pure model and views on synthetic samples (no root): what is lost, what is shown, and that
JSON and text carry the same numbers because they come from one LatReport."""

from __future__ import annotations

import json

from rich.console import Group

from ioscope.base.hist import Hist
from ioscope.base.losses import Losses
from ioscope.base.render import render_plain
from ioscope.engines.latency.model import LatHist, LatSample, build_report, stamps_shortfall
from ioscope.kernel import abi
from ioscope.tools.lat.view import LatViewOptions, renderables, to_json

LOSS_NAMES = frozenset(abi.STAT_NAMES[i] for i in range(abi.NR_LOST_STATS)) | {"recursion_misses"}


def _sample(final: bool, pending: int, in_flight: int, pid_filtered: bool = False) -> LatSample:
    counters = {name: 0 for name in abi.STAT_NAMES.values()} | {"recursion_misses": 1,
                                                                 "issued_not_completed": pending,
                                                                 "inflight_at_start": 2}
    d2c = Hist.from_values([50_000] * 7 + [2_000_000])
    q2c = Hist.from_values([80_000] * 9)
    hists = [LatHist(7 << 20, "loop0", "write", None, None, "d2c", d2c),
             LatHist(7 << 20, "loop0", "read", None, None, "q2c", q2c),
             LatHist(7 << 20, "loop0", "read", None, None, "q2d", Hist())]  # empty: not shown
    return LatSample(wall=1_700_000_010.0, started=1_700_000_000.0, hists=hists,
                     losses=Losses(counters, LOSS_NAMES), kernel_completed={"loop0": 11},
                     kernel_in_flight=in_flight, final=final, pid_filtered=pid_filtered)


def test_unreported_completions_become_losses_only_at_the_end() -> None:
    mid = build_report(_sample(final=False, pending=5, in_flight=2))
    assert mid.completions_unreported == 3
    assert mid.losses.counters["completion_unseen"] == 0 and mid.losses.lost == 1  # recursion_misses
    end = build_report(_sample(final=True, pending=5, in_flight=2))
    assert end.completions_unreported == 3
    assert end.losses.counters["completion_unseen"] == 3 and end.losses.counters["issued_not_completed"] == 2
    assert end.losses.lost == 4
    # -p: diskstats counts every process, so nothing can be concluded from it
    assert build_report(_sample(final=True, pending=5, in_flight=0, pid_filtered=True)).completions_unreported == 0


def test_stamps_alone_count_what_the_kernel_completed_beyond_what_the_program_saw() -> None:
    """With the kernel's stamps there are no slots: the collector takes the kernel's count of requests
    completed since the attach (11 here) against those the program ended (8 d2c + 1 not_stamped), less
    what it found before; every report, not only the last, says what it found."""
    assert stamps_shortfall({"loop0": 11}, {"loop0": 8}, 1, 0) == 2
    assert stamps_shortfall({"loop0": 11}, {"loop0": 8}, 1, 2) == 0   # found and reported already
    assert stamps_shortfall({"loop0": 13}, {"loop0": 11}, 1, 2) == 0  # the kernel read first: never below
    assert stamps_shortfall({"loop0": 14}, {"loop0": 10}, 1, 2) == 1
    # per disk: one disk's surplus (a request completed between the reads) never hides another's shortfall,
    # and the untimed requests, of either disk, are taken from each (a lower bound)
    assert stamps_shortfall({"a": 10, "b": 20}, {"a": 12, "b": 18}, 0, 0) == 2
    assert stamps_shortfall({"a": 10, "b": 20}, {"a": 9, "b": 18}, 1, 0) == 1
    assert stamps_shortfall({"a": 10}, {}, 0, 0) == 10
    s = _sample(final=False, pending=0, in_flight=0)
    s.timing = {"loop0": "kernel stamps"}
    s.stamps_shortfall = 2
    s.losses.counters["not_stamped"] = 1
    s.losses.loss_names = s.losses.loss_names | {"not_stamped"}
    for final in (False, True):
        s.final = final
        r = build_report(s)
        assert r.completions_unreported == 2  # of which 1 recursion miss, a loss already
        assert r.losses.counters["completion_unseen"] == 1 and r.losses.counters["issued_not_completed"] == 0
        assert r.losses.lost == 1 + 1 + 1
    # a stamped disk beside one followed by the probes: what was found on it is lost at once, as well
    mixed = _sample(final=False, pending=0, in_flight=0)
    mixed.timing = {"loop0": "kernel stamps", "loop1": "probes"}
    mixed.stamps_shortfall = 1
    r = build_report(mixed)
    assert r.completions_unreported == 1 and r.losses.counters["completion_unseen"] == 1
    # nothing to compare when d2c is not measured: recursion misses only
    assert build_report(s, phases=("q2c",)).completions_unreported == 1
    assert build_report(s, phases=("q2c",)).losses.counters["completion_unseen"] == 0


def test_json_and_text_from_one_report() -> None:
    r = build_report(_sample(final=True, pending=0, in_flight=0), attach="tp_btf")
    assert [h.phase for h in r.hists] == ["q2c", "d2c"]  # sorted by disk, op; empty histograms dropped
    assert r.timed_d2c == 8 and r.inflight_at_start == 2
    doc = json.loads(json.dumps(to_json(r)))
    assert doc["lost"] == r.losses.lost == 1 and doc["lost_detail"]["recursion_misses"] == 1
    assert doc["interval_s"] == 10.0 and doc["kernel_completed"] == {"loop0": 11}
    assert [(h["op"], h["phase"], h["count"]) for h in doc["hists"]] == [("read", "q2c", 9), ("write", "d2c", 8)]
    text = render_plain(Group(*renderables(r, LatViewOptions(per_op=True))), width=100)
    assert "lost 1" in text.splitlines()[0]
    assert "[op read]" in text and "[op write]" in text
    for h in doc["hists"]:
        assert f"n={h['count']} " in text
    assert "the kernel completed 11 requests on loop0; ioscope timed 8 (d2c)" in text
    assert "2 requests were queued before tracing started" in text


def test_throttled_bios_are_said_in_text_and_json() -> None:
    """Bios blk-throttle held in the interval: one line per cgroup and disk, in text and JSON from one
    report; their wait where fentry measured it (p50, p99, max from the histogram), else why not; with a
    limit in force and nothing held, a dim line says so."""
    from ioscope.engines.context.throttle import HeldBios, Submitter

    s = _sample(final=False, pending=0, in_flight=0)
    s.throttled = [HeldBios(7 << 20, "loop0", "/svc-batch", 27, Hist()),
                   HeldBios(7 << 20, "loop0", "/svc-b", 4, Hist.from_values([250_000_000] * 3 + [1_020_000_000]),
                            submitters=[Submitter(4321, "fio", 3)], wait_from="submit notes")]
    s.throttle_no_wait = "their wait needs fentry: refused"
    s.throttle_limits = [{"cgroup": "/svc-batch", "disk": "loop0", "dev": "7:0", "limits": {"write_iops": 4}}]
    r = build_report(s)
    text = render_plain(Group(*renderables(r, LatViewOptions())), width=400)
    assert ("blk-throttle held 27 bios of cgroup /svc-batch on loop0: their wait is not in q2c and not measured "
            "(their wait needs fentry: refused)") in text
    line = next(ln for ln in text.splitlines() if "of cgroup /svc-b on" in ln)
    assert line.startswith("blk-throttle held 4 bios of cgroup /svc-b on loop0: their wait is not in q2c "
                           "(submitted by fio pid 4321: 3, not known: 1); waited (measured for 4, from the bio's "
                           "submission) p50 "), line
    assert line.endswith("max 1.02s"), line
    doc = json.loads(json.dumps(to_json(r)))
    held = {h["cgroup"]: h for h in doc["throttle"]["held"]}
    assert held["/svc-batch"] == {"disk": "loop0", "cgroup": "/svc-batch", "held": 27, "wait_measured": 0,
                                  "submitters": [], "wait_unit": "ns"}
    assert held["/svc-b"]["wait_measured"] == 4 and held["/svc-b"]["wait_max"] == 1_020_000_000
    assert held["/svc-b"]["wait_from"] == "submit notes"
    assert held["/svc-b"]["submitters"] == [{"pid": 4321, "comm": "fio", "held": 3}]
    assert doc["throttle"]["wait_not_measured"] == "their wait needs fentry: refused"
    s.throttled = []
    text = render_plain(Group(*renderables(build_report(s), LatViewOptions())), width=200)
    assert "blk-throttle limits in force (/svc-batch on loop0): none held a bio in this interval" in text
