"""The command line: help, version, and one-line errors with non-zero exits, no tracebacks."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, json_lines, run_ioscope
from ioscope import __version__, cli, registry
from ioscope.tools import common


def _one_line_error(p: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


TOOLS = tuple(t.name for t in registry.TOOLS)


def test_version_and_help() -> None:
    p = run_ioscope("--version", check=True)
    assert p.stdout.strip() == f"ioscope {__version__}"
    top = run_ioscope("--help", check=True).stdout
    for tool in TOOLS:
        assert f"    {tool}" in top, tool
        h = run_ioscope(tool, "--help", check=True).stdout
        assert "examples:" in h and f"ioscope {tool}" in h, tool


@pytest.mark.parametrize("tool", registry.TOOLS, ids=TOOLS)
def test_every_tool_has_a_doc_page_an_executable_and_a_scenario(tool: registry.Tool) -> None:
    """What the registry says of a tool is there: its command module, its doc page (showing its own command
    line, linked from the README's table), its installed executable (which runs it), its acceptance
    scenarios (which play it)."""
    page = ROOT / "docs" / f"{tool.doc}.md"
    assert page.is_file(), page
    assert f"ioscope {tool.name}" in page.read_text()
    assert f"](docs/{tool.doc}.md)" in (ROOT / "README.md").read_text(), tool.name
    assert callable(getattr(importlib.import_module(tool.module), "add_parser", None))
    exe = Path(sys.executable).parent / tool.executable
    h = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert h.startswith(f"usage: ioscope {tool.name} "), h[:80]
    assert tool.scenarios, f"{tool.name}: no scenario in tests/acceptance/ plays it"
    for f in tool.scenarios:
        text = (ROOT / "tests" / "acceptance" / f).read_text()
        assert f'"{tool.name}"' in text or f"ioscope {tool.name}" in text, (tool.name, f)


def test_every_tool_package_is_in_the_registry() -> None:
    """A tool package without a registry line (or the reverse) would be a tool no command, doc check or
    test knows of; the import contracts (pyproject.toml) list the same packages."""
    pkgs = {d.name for d in (ROOT / "lib" / "ioscope" / "tools").iterdir() if (d / "cmd.py").is_file()}
    assert pkgs == {t.package for t in registry.TOOLS}
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    tools = next(c for c in contracts if c.get("containers") == ["ioscope.tools"])
    assert {x.strip() for layer in tools["layers"] for x in layer.split("|")} == pkgs | {"common"}


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
    # issue 16: words no option took are the tool's error, with its name, not the top-level parser's
    (["snoop", "1", "1"], "ioscope snoop: error: unrecognized arguments: 1 1; snoop takes no interval or count "
                          "(-w SECONDS stops it); see ioscope snoop --help"),
    (["lat", "--foo"], "ioscope lat: error: unrecognized arguments: --foo; see ioscope lat --help"),
    (["top", "1", "2", "3"], "ioscope top: error: unrecognized arguments: 3; see ioscope top --help"),
])
def test_bad_arguments(args: list[str], needle: str) -> None:
    _one_line_error(run_ioscope(*args), 2, needle)


def test_unknown_disk(live: None) -> None:
    _one_line_error(run_ioscope("lat", "-d", "nosuchdisk"), 1, "unknown disk 'nosuchdisk'", "/sys/block")


@pytest.mark.parametrize("tool", ["lat", "top", "agg"])
def test_unknown_cgroup(live: None, tool: str) -> None:
    """-c with a cgroup that does not exist: the tool says where it looked, in one line, before loading."""
    args = ["-e", "count()"] if tool == "agg" else (["-b"] if tool == "top" else [])
    p = run_ioscope(tool, "-c", "/no-such-cgroup/x", *args, "1", "1")
    _one_line_error(p, 2, "cgroup '/no-such-cgroup/x' does not exist (looked for ", "/proc/PID/cgroup")


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
              "-n": ("count_n", False), "-r": ("rows", False), "-q": ("quiet", False), "-o": ("output", False),
              "-f": ("force", False)}
# parse speaks blkparse's letters, btt btt's; agg's -r reads a capture (its rows are --rows), and so does sql's
OWN_LETTERS = {"parse": {"-f", "-q", "-o", "-w"}, "agg": {"-r"}, "sql": {"-r"}, "btt": {"-d", "-p", "-q", "-r"}}


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
                if opt not in VOCABULARY or opt in OWN_LETTERS.get(tool, set()):
                    continue
                dest, repeatable = VOCABULARY[opt]
                if act.help == argparse.SUPPRESS:  # a deprecated spelling, kept working
                    continue
                assert act.dest == dest, (tool, opt, act.dest)
                assert isinstance(act, argparse._AppendAction) == repeatable, (tool, opt)
                row = next(ln for ln in table.splitlines() if ln.startswith(f"| `{opt}"))
                assert tool in row.rsplit("|", 2)[1], (tool, opt, "missing from docs/cli.md")
    # positional interval/count: same validation everywhere, and -n N beside them; rows are never -n
    for tool, p in _tool_parsers().items():
        pos = {a.dest: a for a in p._actions if not a.option_strings}
        n = p._option_string_actions.get("-n")
        if "interval" in pos:
            assert pos["interval"].type is common.positive_float, tool
            assert pos["count"].type is common.positive_int, tool
            assert n is not None and n.dest == "count_n" and n.type is common.positive_int, tool
        elif n is not None:
            assert n.help == argparse.SUPPRESS and n.dest == "rows", (tool, "-n is the count or an old spelling")


def test_deprecated_spellings_still_work_with_a_note() -> None:
    p = run_ioscope("lat", "-F", "--phase", "q2x")
    assert p.returncode == 2 and "unknown phase" in p.stderr  # -F parsed (else: unrecognized)
    ns = _tool_parsers()["lat"].parse_args(["-F"])
    assert ns.per_op is True
    ns = _tool_parsers()["top"].parse_args(["-l", "7", "--iterations", "3"])  # --iterations: procps top's -n
    assert ns.rows == 7 and ns.count == 3 and ns.interval == 1.0
    ns = _tool_parsers()["fleet"].parse_args(["-n", "4", "x"])  # no count there: -n is still rows, with a note
    assert ns.rows == 4


@pytest.mark.parametrize(("args", "interval", "count", "rows", "note"), [
    (["top", "-b", "-n", "1"], 1.0, 1, None, False),     # procps top -b -n 1: one report, every 1 s; top says
    (["top", "-n", "2", "0.5"], 0.5, 2, None, False),     # the note only if a report has more than N rows
    (["top", "0.5", "2", "-n", "2"], 0.5, 2, None, False),  # the same count twice is fine
    (["top", "-n", "3", "-r", "5"], 1.0, 3, 5, False),    # rows given too: clearly the new meaning, no note
    (["top", "--count", "3"], 1.0, 3, None, False),
    (["lat", "-n", "2"], 1.0, 2, None, False),            # no rows in lat: nothing to confuse
    (["readsize", "-n", "2"], 1.0, 2, 20, True),
    (["agg", "-e", "count()", "--rows", "4", "-n", "2"], 1.0, 2, 4, False),
    (["nic", "-n", "3", "2"], 2.0, 3, None, False),
    (["fair", "2", "3"], 2.0, 3, None, False),
])
def test_n_is_the_number_of_reports(args: list[str], interval: float, count: int, rows: int | None,
                                    note: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """-n N is the number of reports in every tool with [interval [count]], as in top and iotop (issue 21)."""
    ns = cli.build_parser([args[0]]).parse_args(args)
    assert (ns.interval, ns.count, getattr(ns, "rows", None)) == (interval, count, rows)
    assert not hasattr(ns, "count_n")
    if args[0] == "top" and "-r" not in args and "--count" not in args:   # deferred: said when rows > N
        common.rows_note_if_cut(ns, count)
        assert capsys.readouterr().err == ""
        common.rows_note_if_cut(ns, count + 1)
        common.rows_note_if_cut(ns, count + 2)   # once
        note = True
    err = capsys.readouterr().err
    if note:
        assert err.count("\n") == 1 and f"ioscope {args[0]}: note: -n {count} is the number of reports" in err
        assert "-r/--rows N" in err
    else:
        assert err == ""


def test_n_and_a_different_count_is_one_line() -> None:
    _one_line_error(run_ioscope("top", "-b", "-n", "2", "1", "5"), 2, "-n 2 and COUNT 5 disagree",
                    "see ioscope top --help")
    _one_line_error(run_ioscope("lat", "-n", "0"), 2, "count must be at least 1")
    # a capture is read once: a count there is refused, and the error says what does cut it in windows
    _one_line_error(run_ioscope("agg", "-r", "x.ioscope", "-e", "count()", "--count", "2"), 2,
                    "with -r the capture is read once: no interval, count (-n)", "--every SECONDS")


@pytest.mark.parametrize("tool", [None, *cli.TOOLS])
def test_help_and_version_import_no_numpy(tool: str | None) -> None:
    """`ioscope --version` and `ioscope TOOL --help` import only the command line (issue 14's start-up
    goal): numpy, pyarrow, rich's tables and the BPF loader come when a tool runs, not to print its help."""
    argv = ["--version"] if tool is None else [tool, "--help"]
    heavy = ("numpy", "pyarrow", "ioscope.kernel._libbpf", "prometheus_client")
    code = (f"import sys\nfrom ioscope.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stderr.strip().splitlines()[-1:] in ([], [""]), (argv, p.stderr)


# every tool with [interval [count]]: its arguments for one disk (or interface), and -j's one object per report
COUNTING = {t.name: list(t.counting) for t in registry.TOOLS if t.counting}


def test_counting_tools_are_all_tested() -> None:
    counting = {t for t, p in _tool_parsers().items() if any(a.dest == "count" for a in p._actions)}
    assert counting == set(COUNTING)


@pytest.mark.parametrize("tool", sorted(COUNTING))
def test_n_reports_then_exit(tool: str, live: None, loopdev: Callable[..., Any]) -> None:
    """`ioscope TOOL -n 1` ends by itself after one report (one second), `-n 2 0.3` after two, exit 0."""
    dev = loopdev(size_mb=16)
    args = [a.format(disk=dev.name) for a in COUNTING[tool]]
    for extra, reports, least_s in ((["-n", "1"], 1, 1.0), (["-n", "2", "0.3"], 2, 0.6)):
        t0 = time.monotonic()
        p = run_ioscope(tool, *args, *extra, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode == 0, p.stderr
        docs = json_lines(p.stdout)
        assert len(docs) == reports == len(p.stdout.splitlines()), p.stdout
        assert took >= least_s, took
        assert "Traceback" not in p.stderr


def test_top_batch_n_1_like_procps(live: None, loopdev: Callable[..., Any]) -> None:
    """procps' `top -b -n 1` and iotop's: one plain-text snapshot, then exit 0 (it used to run forever)."""
    dev = loopdev(size_mb=16)
    p = run_ioscope("top", "-b", "-n", "1", "-d", dev.name, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("ioscope top - ") == 1, p.stdout
    p = run_ioscope("top", "-b", "-n", "3", "0.2", "-d", dev.name, timeout=60)
    assert p.returncode == 0 and p.stdout.count("ioscope top - ") == 3, (p.stdout, p.stderr)
