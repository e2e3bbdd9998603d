"""ioscope nic's command line: bad input is one line and exit 2, --help is light and matches docs/nic.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_ioscope


def _one_line_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_unknown_interface_names_the_ones_that_exist() -> None:
    line = _one_line_error(run_ioscope("nic", "-i", "nosuchif0", "1", "1"), 2, "unknown interface 'nosuchif0'")
    here = sorted(os.listdir("/sys/class/net"))
    listed = line.split("interfaces here: ", 1)[1].split(", ")
    assert sorted(listed) == here
    # several at once, one of them real: only the unknown ones are named
    line = _one_line_error(run_ioscope("nic", "-i", "lo,nosuchif0", "-i", "nosuchif1"), 2,
                           "unknown interfaces 'nosuchif0', 'nosuchif1'")
    assert "'lo'" not in line


@pytest.mark.parametrize(("args", "needle"), [
    (["0"], "interval must be a positive number"),
    (["abc"], "interval must be a number"),
    (["1", "0"], "count must be at least 1"),
    (["1", "x"], "count must be a whole number"),
    (["-i", ","], "interface name expected"),
    (["--speed", "1"], "unrecognized arguments"),
])
def test_bad_arguments(args: list[str], needle: str) -> None:
    _one_line_error(run_ioscope("nic", *args), 2, needle, "--help")


def test_help_examples_are_on_the_doc_page() -> None:
    doc = (ROOT / "docs" / "nic.md").read_text()
    h = run_ioscope("nic", "--help", check=True).stdout
    for line in h.split("examples:")[1].strip().splitlines():
        assert line.split("#")[0].strip() in doc, line


def test_help_imports_no_netlink_and_no_rich() -> None:
    code = ("import sys\nfrom ioscope.cli import main\ntry:\n    main(['nic', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(','.join(m for m in ('pyroute2', 'rich', 'numpy') if m in sys.modules), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip() == "", p.stderr


def test_one_interval_of_lo_as_text_and_json() -> None:
    """Without root: netlink's link dump needs no privilege. lo's speed is unknown: said, not 0."""
    p = run_ioscope("nic", "-i", "lo", "0.2", "2", check=True)
    assert p.stdout.count("  interval 0.") == 2 and "Tracing network interface counters of lo" in p.stderr
    assert "does not know the link speed of lo" in p.stdout
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.split()[1:2] == ["lo"]]
    assert len(rows) == 2 and all(r[8] == "n/a" for r in rows)
    j = run_ioscope("nic", "-j", "-i", "lo", "0.2", "1", check=True)
    (doc,) = [json.loads(ln) for ln in j.stdout.splitlines()]
    (row,) = doc["interfaces"]
    assert row["iface"] == "lo" and row["util_pct"] is None and row["speed_mbps"] is None
