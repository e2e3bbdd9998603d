"""The command line: help, version, and one-line errors with non-zero exits, no tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_ioscope
from ioscope import __version__


def _one_line_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


TOOLS = ("lat", "readsize", "readahead", "fair", "top", "record", "snoop", "parse", "report", "export", "import",
         "demo")


def test_version_and_help() -> None:
    p = run_ioscope("--version", check=True)
    assert p.stdout.strip() == f"ioscope {__version__}"
    top = run_ioscope("--help", check=True).stdout
    for tool in TOOLS:
        assert f"    {tool}" in top, tool
        h = run_ioscope(tool, "--help", check=True).stdout
        assert "examples:" in h and f"ioscope {tool}" in h, tool


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_has_a_doc_page_and_a_thin_executable(tool: str) -> None:
    assert (ROOT / "tools" / f"ioscope-{tool}").is_file()
    page = ROOT / "docs" / f"{tool}.md"
    assert page.is_file(), page
    # the page shows the tool's own command line
    assert f"ioscope {tool}" in page.read_text()


def test_lat_help_examples_match_docs() -> None:
    doc = (ROOT / "docs" / "lat.md").read_text()
    h = run_ioscope("lat", "--help", check=True).stdout
    for line in h.split("examples:")[1].strip().splitlines():
        assert line.split("#")[0].strip() in doc, line


@pytest.mark.parametrize(("args", "needle"), [
    (["lat", "0"], "interval must be a positive number"),
    (["lat", "1", "-3"], "count must be at least 1"),
    (["lat", "abc"], "interval must be a number"),
    (["lat", "--phase", "q2x"], "unknown phase"),
    (["lat", "-p", "zero"], "PID must be a number"),
    (["nosuchtool"], "invalid choice"),
])
def test_bad_arguments(args: list[str], needle: str) -> None:
    _one_line_error(run_ioscope(*args), 2, needle)


def test_unknown_disk(live: None) -> None:
    _one_line_error(run_ioscope("lat", "-d", "nosuchdisk"), 1, "unknown disk 'nosuchdisk'", "/sys/block")


def test_missing_btf(live: None) -> None:
    p = run_ioscope("lat", "--btf", "/nonexistent/vmlinux")
    _one_line_error(p, 1, "kernel BTF not found at /nonexistent/vmlinux", "--btf")
    p = run_ioscope("lat", env={"IOSCOPE_BTF": "/nonexistent/btf"})
    _one_line_error(p, 1, "kernel BTF not found at /nonexistent/btf")


def test_not_root(live: None) -> None:
    """A real unprivileged process (uid nobody, no capabilities), not a simulation."""
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
           sys.executable, "-m", "ioscope.cli", "lat"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    _one_line_error(p, 1, "needs root", "sudo")
