"""The command line: help, version, and one-line errors with non-zero exits, no tracebacks."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_ioscope
from ioscope import __version__, cli, cli_common


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


# docs/cli.md: option letter -> (dest, repeatable) in every tool that has it; parse speaks blkparse's letters
VOCABULARY = {"-d": ("disk", True), "-p": ("pid", False), "-c": ("cgroup", False), "-j": ("json", False),
              "-n": ("rows", False), "-q": ("quiet", False), "-o": ("output", False), "-f": ("force", False)}
BLKPARSE_LETTERS = {"parse": {"-f", "-q", "-o", "-w"}}


def _tool_parsers() -> dict[str, argparse.ArgumentParser]:
    from ioscope.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_one_option_vocabulary() -> None:
    """An option letter means one thing in every tool (docs/cli.md); the table there lists who has what."""
    table = (ROOT / "docs" / "cli.md").read_text()
    for tool, p in _tool_parsers().items():
        for act in p._actions:
            for opt in act.option_strings:
                if opt not in VOCABULARY or opt in BLKPARSE_LETTERS.get(tool, set()):
                    continue
                dest, repeatable = VOCABULARY[opt]
                if act.help == argparse.SUPPRESS:  # a deprecated spelling, kept working
                    continue
                assert act.dest == dest, (tool, opt, act.dest)
                assert isinstance(act, argparse._AppendAction) == repeatable, (tool, opt)
                row = next(ln for ln in table.splitlines() if ln.startswith(f"| `{opt}"))
                assert tool in row.rsplit("|", 2)[1], (tool, opt, "missing from docs/cli.md")
    # positional interval/count: same validation everywhere
    for tool, p in _tool_parsers().items():
        pos = {a.dest: a for a in p._actions if not a.option_strings}
        if "interval" in pos:
            assert pos["interval"].type is cli_common.positive_float, tool
            assert pos["count"].type is cli_common.positive_int, tool


def test_deprecated_spellings_still_work_with_a_note() -> None:
    p = run_ioscope("lat", "-F", "--phase", "q2x")
    assert p.returncode == 2 and "unknown phase" in p.stderr  # -F parsed (else: unrecognized)
    ns = _tool_parsers()["lat"].parse_args(["-F"])
    assert ns.per_op is True
    ns = _tool_parsers()["top"].parse_args(["-l", "7", "--iterations", "3"])
    assert ns.rows == 7 and ns.iterations == 3


@pytest.mark.parametrize("tool", [None, *cli.TOOLS])
def test_help_and_version_import_no_numpy(tool: str | None) -> None:
    """`ioscope --version` and `ioscope TOOL --help` import only the command line (issue 14's start-up
    goal): numpy, pyarrow, rich's tables and the BPF loader come when a tool runs, not to print its help."""
    argv = ["--version"] if tool is None else [tool, "--help"]
    heavy = ("numpy", "pyarrow", "ioscope._libbpf", "prometheus_client")
    code = (f"import sys\nfrom ioscope.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1:] in ([], [""]), (argv, p.stderr)
