"""agg's folded stacks and flame graphs without root: rows -> folded stacks (key frames, root first,
escaping, merging), the flame graph's tree, the lines --folded prints, the pictures, and the command
line's one-line refusals."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import run_ioscope
from ioscope.base.errors import UsageError
from ioscope.engines.aggregate.expr import parse_all
from ioscope.engines.aggregate.folded import (
    KERNEL,
    KEY,
    USER,
    FoldedStack,
    check_foldable,
    flame_tree,
    fold_table,
    frame_text,
    merge_folded,
)
from ioscope.engines.aggregate.model import AggTable, ResultRow
from ioscope.engines.pages.flame import write_flamegraph
from ioscope.tools.agg.view import folded_lines

# leaf first, one frame a line: what names.stack_text and names.ustack_text give a row's key
K_WRITE = "submit_bio_noacct_nocheck+0x22d\nvfs_write+0x22f\nksys_write+0x66\nentry_SYSCALL_64_after_hwframe+0x76"
K_READ = "submit_bio_noacct_nocheck+0x22d\nvfs_read+0x23a\nksys_read+0x66\nentry_SYSCALL_64_after_hwframe+0x76"
U_MAIN = "raw_pwrite+0x29 (ustk)\nwrite_a+0x3d (ustk)\nmain+0xe9 (ustk)"


def table(expr: str, rows: list[tuple[dict[str, str | int], int]]) -> AggTable:
    e = parse_all([expr])[0]
    return AggTable(e.text, e.func, e.value, e.unit, e.keys, [ResultRow(k, v, count=v) for k, v in rows])


def test_kernel_stack_root_first_after_the_process() -> None:
    t = table("count() by kstack,comm", [({"kstack": K_WRITE, "comm": "flamewr"}, 101),
                                         ({"kstack": K_READ, "comm": "dd"}, 13)])
    got = fold_table(t)
    # the process first although the expression names it last; sorted by frames (dd before flamewr)
    assert [s.frames for s in got] == [
        ("dd", "entry_SYSCALL_64_after_hwframe+0x76", "ksys_read+0x66", "vfs_read+0x23a",
         "submit_bio_noacct_nocheck+0x22d"),
        ("flamewr", "entry_SYSCALL_64_after_hwframe+0x76", "ksys_write+0x66", "vfs_write+0x22f",
         "submit_bio_noacct_nocheck+0x22d")]
    assert [s.value for s in got] == [13, 101]
    assert got[1].kinds == (KEY, KERNEL, KERNEL, KERNEL, KERNEL)
    assert folded_lines(got) == [
        "dd;entry_SYSCALL_64_after_hwframe+0x76;ksys_read+0x66;vfs_read+0x23a;submit_bio_noacct_nocheck+0x22d 13",
        "flamewr;entry_SYSCALL_64_after_hwframe+0x76;ksys_write+0x66;vfs_write+0x22f;"
        "submit_bio_noacct_nocheck+0x22d 101"]


def test_other_keys_are_named_frames_and_user_frames_come_before_kernel_frames() -> None:
    t = table("sum(bytes) by op,kstack,comm,ustack", [({"op": "write", "kstack": K_WRITE, "comm": "ustk",
                                                      "ustack": U_MAIN}, 4096 * 41)])
    (s,) = fold_table(t)
    assert s.frames == ("ustk", "op=write", "main+0xe9 (ustk)", "write_a+0x3d (ustk)", "raw_pwrite+0x29 (ustk)",
                        "entry_SYSCALL_64_after_hwframe+0x76", "ksys_write+0x66", "vfs_write+0x22f",
                        "submit_bio_noacct_nocheck+0x22d")
    assert s.kinds == (KEY, KEY, USER, USER, USER, KERNEL, KERNEL, KERNEL, KERNEL)
    assert s.value == 167936   # sum(bytes): the sum


def test_frames_cannot_break_the_format() -> None:
    assert frame_text("a;b") == "a:b"
    assert frame_text("two\nlines\tand\x7f") == "two?lines?and?"
    assert frame_text("") == "[empty]"
    # a process name with ';' and one with ':' fold alike: one stack, their values added
    t = table("count() by comm,kstack", [({"comm": "x;y", "kstack": K_READ}, 3),
                                         ({"comm": "x:y", "kstack": K_READ}, 4),
                                         ({"comm": "", "kstack": K_READ}, 1),
                                         ({"comm": "new\nline", "kstack": "f"}, 2)])
    got = fold_table(t)
    assert {s.frames[0]: s.value for s in got} == {"x:y": 7, "[empty]": 1, "new?line": 2}
    for line in folded_lines(got):   # one line each, "frames value": what flamegraph.pl and speedscope read
        m = re.fullmatch(r"([^;\n]+(?:;[^;\n]+)*) (\d+)", line)
        assert m, line


def test_intervals_merge_by_adding_equal_stacks() -> None:
    a = [FoldedStack(("p", "f", "g"), 5, (KEY, KERNEL, KERNEL)), FoldedStack(("p", "f"), 2, (KEY, KERNEL))]
    b = [FoldedStack(("p", "f", "g"), 7, (KEY, KERNEL, KERNEL)), FoldedStack(("q", "f"), 1, (KEY, KERNEL))]
    got = merge_folded([*a, *b])
    assert [(s.frames, s.value) for s in got] == [(("p", "f"), 2), (("p", "f", "g"), 12), (("q", "f"), 1)]


def test_flame_tree_widths_add_up() -> None:
    stacks = [FoldedStack(("dd", "entry", "ksys_write", "submit"), 101, (KEY, KERNEL, KERNEL, KERNEL)),
              FoldedStack(("dd", "entry", "ksys_read", "submit"), 13, (KEY, KERNEL, KERNEL, KERNEL)),
              FoldedStack(("dd", "entry"), 4, (KEY, KERNEL)),
              FoldedStack(("jbd2/loop0-8", "kthread"), 29, (KEY, KERNEL))]
    nodes = flame_tree(stacks)
    root = nodes[0]
    assert (root.frame, root.depth, root.start, root.value) == ("all", 0, 0, 147)
    by_path = {n.path: n for n in nodes}
    assert len(by_path) == len(nodes) == 9
    entry = by_path[("dd", "entry")]
    assert (entry.value, entry.self_value) == (118, 4)
    # children in name order, side by side from their parent's start; with its self value as wide as it
    kids = [by_path[("dd", "entry", "ksys_read")], by_path[("dd", "entry", "ksys_write")]]
    assert [(k.start, k.value) for k in kids] == [(0, 13), (13, 101)]
    for n in nodes:
        children = [c for c in nodes if c.depth == n.depth + 1 and c.path[:-1] == n.path]
        assert n.value == n.self_value + sum(c.value for c in children), n
        at = n.start
        for c in sorted(children, key=lambda c: c.start):
            assert c.start == at
            at += c.value
    assert by_path[("jbd2/loop0-8",)].start == 118
    assert flame_tree([])[0].value == 0


@pytest.mark.parametrize("expr, needle", [
    ("count() by comm", "has no kstack or ustack key"),
    ("avg(bytes) by kstack", "count() or sum(VALUE), not avg()"),
    ("quantize(q2c) by comm,kstack", "not quantize()"),
])
def test_what_cannot_fold_is_refused(expr: str, needle: str) -> None:
    with pytest.raises(UsageError, match=re.escape(needle)):
        check_foldable(parse_all([expr])[0], "--folded")


def test_flamegraph_files_hold_the_total(tmp_path: Path) -> None:
    stacks = fold_table(table("count() by comm,kstack", [({"comm": "flamewr", "kstack": K_WRITE}, 101),
                                                         ({"comm": "dd", "kstack": K_READ}, 13)]))
    for ext in ("svg", "html", "png"):
        path = tmp_path / f"f.{ext}"
        assert write_flamegraph(str(path), stacks, "count() by comm,kstack", "count", "count", "counts bios") > 0
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600   # process names and stacks: owner only
    svg = (tmp_path / "f.svg").read_text()
    # vega writes each rectangle's fields as its aria-label: the root holds the total, each frame its count
    assert 'frame: all; count: 114; % of all: 100.00' in svg
    assert 'frame: flamewr; count: 101' in svg and 'frame: dd; count: 13' in svg
    page = (tmp_path / "f.html").read_text()
    nums = json.loads(page.split("id=numbers>", 1)[1].split("</script>", 1)[0])
    assert nums["total"] == 114 and nums["stacks"] == 2
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, needle", [
    (["-e", "count() by comm", "--folded"], "--folded draws stacks: 'count() by comm' has no kstack or ustack key"),
    (["-e", "avg(bytes) by comm,kstack", "--folded"], "not avg()"),
    (["-e", "count() by kstack", "-e", "count() by comm", "--folded"], "give one -e"),
    (["-e", "count() by kstack", "--folded", "-j"], "--folded and -j"),
    (["-e", "count() by kstack", "-e", "count() by ustack", "--flamegraph", "/tmp/x.html"], "2 have a stack key"),
    (["-e", "count() by kstack", "--flamegraph", "/tmp/flame.txt"], "--flamegraph /tmp/flame.txt: the file name"),
    (["-e", "count() by kstack", "--flamegraph", "/nonexistent-dir/f.svg"], "does not exist"),
    (["-e", "count() by kstack", "--folded", "-r", "cap.ioscope"], "captures hold no stacks yet"),
    (["--bpftrace", "BEGIN { exit(); }", "--folded"], "not a bpftrace program's maps"),
])
def test_bad_folded_arguments_are_one_line(args: list[str], needle: str) -> None:
    p: subprocess.CompletedProcess[str] = run_ioscope("agg", *args)
    assert p.returncode in (1, 2), p.stderr
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ioscope agg: error: ") and needle in lines[0], p.stderr
    if needle != "does not exist":   # a missing directory is a run-time error (1), as for report --html
        assert p.returncode == 2, p.stderr


@pytest.mark.parametrize("cumulative", [False, True])
def test_intervals_print_each_and_the_picture_holds_the_whole_run(tmp_path: Path, cumulative: bool,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Every interval prints its own lines (its header on stderr); the picture is the whole run: the
    intervals added up, or with --cumulative (each interval already everything so far) the last one."""
    import argparse

    from ioscope.base.losses import Losses
    from ioscope.engines.aggregate.model import AggResult
    from ioscope.tools.agg.cmd import Flame

    e = parse_all(["count() by comm,kstack"])[0]
    first = [({"comm": "dd", "kstack": K_READ}, 13)]
    second = [({"comm": "dd", "kstack": K_READ}, 20 if cumulative else 7), ({"comm": "w", "kstack": K_WRITE}, 5)]
    path = tmp_path / "f.html"
    args = argparse.Namespace(folded=True, flamegraph=str(path), cumulative=cumulative)
    flame = Flame(args, [e], 0)
    for i, rows in enumerate((first, second)):
        flame.add(AggResult(1000.0 + i, 1.0, Losses(), [table(e.text, rows)], timing={"loop0": "at queue"}))
    flame.write()
    out, err = capsys.readouterr()
    read = K_READ.split("\n")[::-1]
    assert out.splitlines() == [";".join(["dd", *read]) + " 13",
                                ";".join(["dd", *read]) + (" 20" if cumulative else " 7"),
                                ";".join(["w", *K_WRITE.split("\n")[::-1]]) + " 5"]
    assert err.count("interval 1.000s  lost 0  counts bios") == 2, err
    assert "2 stacks, 25 in all" in err, err   # 13 + 7 + 5, or the last cumulative interval: 20 + 5
    page = path.read_text()
    assert json.loads(page.split("id=numbers>", 1)[1].split("</script>", 1)[0])["total"] == 25


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium") and not os.environ.get("CI"),
                    reason="no /usr/bin/chromium (scripts/bootstrap.sh --test installs it)")
def test_flame_page_zooms_into_a_clicked_frame(tmp_path: Path) -> None:
    """A click on a frame too narrow for its name spreads it across the page (its name then shown whole,
    its siblings gone); a click on the root shows everything again."""
    from ioscope.engines.pages.browser import chromium, open_page

    stacks = fold_table(table("count() by comm,kstack", [({"comm": "flamewr", "kstack": K_WRITE}, 997),
                                                         ({"comm": "dd", "kstack": K_READ}, 3)]))
    path = tmp_path / "f.html"
    write_flamegraph(str(path), stacks, "count() by comm,kstack", "count", "count", "counts bios")

    def click(o: Any, frame: str) -> None:
        """A real click on the frame's rectangle, inside its left edge (a zoomed root runs off the page)."""
        x, y = o.page.evaluate("(f) => { const b = document.querySelector(`path[aria-label*='frame: ${f};']`)"
                               ".getBoundingClientRect(); return [b.x + Math.min(b.width / 2, 5), "
                               "b.y + b.height / 2]; }", frame)
        o.page.mouse.click(x, y)

    with chromium() as ctx:
        o = open_page(ctx, path.as_uri())
        assert not o.errors and not o.requests, (o.errors, o.requests)
        marks = o.marks("flame", "labels")
        labels = {m["frame"]: m["label"] for m in marks}
        assert labels["dd"] == "" and labels["flamewr"] == "flamewr" and len(marks) == 11   # 11 nodes, 9 names
        click(o, "vfs_read+0x23a")
        o.page.wait_for_function("document.body.dataset.zoomed >= 1")
        labels = {m["frame"]: m["label"] for m in o.marks("flame", "labels")}
        # the clicked frame, its callees and its callers, named whole; flamewr's stack is out of the range
        assert labels == {f: f for f in ("all", "dd", "entry_SYSCALL_64_after_hwframe+0x76", "ksys_read+0x66",
                                         "vfs_read+0x23a", "submit_bio_noacct_nocheck+0x22d")}, labels
        click(o, "all")
        o.page.wait_for_function("document.body.dataset.zoomed >= 2")
        assert len(o.marks("flame", "frames")) == 11
        assert not o.errors, o.errors
