"""`ioscope demo readahead`, live and small: what the tools report against the readers' own counts."""

from __future__ import annotations

from conftest import json_lines, run_ioscope


def test_demo_readahead_matches_readers(live: None) -> None:
    p = run_ioscope("demo", "readahead", "--readers", "3", "--file-mb", "8", "--seconds", "1",
                    "--small-kb", "128", "--large-kb", "4096", "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    docs = json_lines(p.stdout)
    assert [d["read_ahead_kb"] for d in docs] == [128, 4096]
    for d in docs:
        assert len(d["readers"]) == 3
        for r in d["readers"]:
            # bytes readsize saw returned to each reader == what the reader counted itself
            assert r["counted_bytes"] > 0 and r["read_bytes"] == r["counted_bytes"]
        # every block read on the device during the run was attributed to one of the readers
        assert sum(r["dev_read_bytes"] for r in d["readers"]) == d["disk_read_bytes"]
        assert d["balance"]["n"] == 3
        xs = [r["read_bytes"] for r in d["readers"]]
        assert abs(d["balance"]["jain"] - sum(xs) ** 2 / (3 * sum(x * x for x in xs))) < 1e-6
        windows = [f["max_window"] for f in d["readahead"]["files"]]
        assert max(windows) <= d["read_ahead_kb"] // 4
        t = d["readahead"]["totals"]
        assert t["used"] + t["wasted"] + t["cached"] + t["untracked"] == t["pages"]
