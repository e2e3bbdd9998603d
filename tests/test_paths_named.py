"""Every path of this tree that a comment, a docstring or a page names exists (issue 37: comments pointed
at files that had moved: lib/ioscope/trace/events.py, tests/test_ra_abi.py, bpf/readahead.bpf.h).

A path is a word with a slash and a file extension (`lib/ioscope/capture/store.py`, `bpf/ra.h`,
`kernel/inflight.py`, `docs/record.md`). It is looked for from the top of the tree, then from the package
(lib/ioscope) and from bpf/, as the comments write them. Paths of other projects are not this tree's:
the Linux kernel's (`kernel/trace/blktrace.c`, `block/blk-throttle.c`), bcc's `tools/biosnoop.py`,
libbpf's `<bpf/bpf_helpers.h>`. A path is checked when its first directory is one of this tree's (or
the package's) and, under `tools/` and `kernel/`, when it names an ioscope tool or a Python module."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "lib" / "ioscope"
BPF = ROOT / "bpf"

PATH = re.compile(r"(?<![\w./<-])((?:[\w.+-]+/)+[\w.+-]+\.(?:py|c|h|md|sh|toml|json|service))(?![\w/-])")
ROOTED = {".ci", "lib", "bpf", "tests", "docs", "scripts", "bench"}
# named for what they are not: a pattern, or another project's file (why, beside each)
NOT_OURS = {
    "docs/web-configuration.md",   # the Prometheus exporter-toolkit's page (tools/exporter/webconfig.py)
}
PLACEHOLDER = re.compile(r"\b(NAME|DOC|test_x)\b")


def _texts() -> list[Path]:
    out = [ROOT / n for n in ("README.md", "test.sh", "install.sh", "setup.py") if (ROOT / n).exists()]
    for top in ("lib", "bpf", "tests", "docs", "scripts", "bench", ".ci"):
        for p in (ROOT / top).rglob("*"):
            if (p.is_file() and p.suffix in (".py", ".c", ".h", ".md", ".sh", "")
                    and not {"__pycache__", ".venv", "golden", "data"} & set(p.parts)):
                out.append(p)
    return out


def _ours(path: str) -> bool:
    first, rest = path.split("/", 1)
    if first in ROOTED:
        return True
    if first == "tools":   # an ioscope tool's directory, not bcc's tools/*.py
        return (PKG / "tools" / rest.split("/", 1)[0]).is_dir()
    if first == "kernel":  # ioscope's kernel/ holds Python; Linux's kernel/ holds C
        return path.endswith(".py")
    return (PKG / first).is_dir() or first == "trace"   # trace/: the package's old name for capture/


def _exists(path: str) -> bool:
    return any((base / path).exists() for base in (ROOT, PKG, BPF))


def missing() -> list[str]:
    bad = []
    for f in _texts():
        if f == Path(__file__).resolve():   # this file names stale paths on purpose
            continue
        try:
            text = f.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1)
                if path in NOT_OURS or PLACEHOLDER.search(path) or not _ours(path) or _exists(path):
                    continue
                bad.append(f"{f.relative_to(ROOT)}:{n}: {path}")
    return bad


def test_every_path_a_comment_or_page_names_exists() -> None:
    assert missing() == []


def test_the_check_finds_a_moved_file(tmp_path: Path) -> None:
    """The check fails on what it is for: the stale names the issue listed."""
    for stale in ("lib/ioscope/trace/events.py", "tests/test_ra_abi.py", "bpf/readahead.bpf.h", "trace/events.py",
                  "tools/record/model_gone.py", "kernel/nothere.py"):
        assert PATH.fullmatch(stale) and _ours(stale) and not _exists(stale), stale
    for foreign in ("kernel/trace/blktrace.c", "tools/biosnoop.py", "block/blk-throttle.c"):
        assert not _ours(foreign) or _exists(foreign), foreign
    assert PATH.search("#include <bpf/bpf_helpers.h>") is None


UNQUOTED_PY = re.compile(r"""f["'][^"']*\{sys\.executable\}""")


def test_no_shell_line_holds_the_interpreter_unquoted() -> None:
    """A clone under "/tmp/io scope" (issue 34) has a space in the interpreter's path: a shell line that
    holds it unquoted runs "/tmp/io" (six acceptance scenarios failed so). conftest.PY is it quoted."""
    bad = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py"))
           for n, line in enumerate(p.read_text().splitlines(), 1) if UNQUOTED_PY.search(line)]
    assert not bad, bad
    assert UNQUOTED_PY.search('cmd = f"{sys.' + 'executable} -c pass"')   # the check finds one
