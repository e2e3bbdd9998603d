"""agg's rows with a stack key as folded stacks (the flame-graph tools' input: `frame;frame;... N`, root
first) and as the tree a flame graph draws. Pure: no kernel, no files, no printing.

A row of `count() by comm,kstack` (or `sum(V) by ...`, with `ustack`, and with other keys) becomes one
stack: its keys other than the stacks first (`comm` as the process name alone, as the stackcollapse
tools and bpftrace users expect it first; others as `key=value`), then the user stack and then the kernel
stack, each root first (the kernel's walk gives them leaf first). Its value is the row's count or sum:
values that add up, since a flame graph's parent is as wide as its children together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ioscope.base.errors import UsageError
from ioscope.engines.aggregate.expr import STACK_KEYS, Expr
from ioscope.engines.aggregate.model import AggTable

FOLDED_FUNCS = ("count", "sum")   # values that add up along a stack
ROOT = "all"                      # the flame graph's root frame, as flamegraph.pl and speedscope name it
# frame kinds (the picture colours by them)
KEY, USER, KERNEL = "key", "user", "kernel"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_foldable(e: Expr, option: str) -> None:
    """Refuse, in one line, an expression a folded stack cannot carry."""
    if not any(k in e.keys for k in STACK_KEYS):
        raise UsageError(f"{option} draws stacks: '{e.text}' has no kstack or ustack key",
                         "key it by a stack, e.g. -e 'count() by comm,kstack'")
    if e.func not in FOLDED_FUNCS:
        raise UsageError(f"{option} needs values that add up along a stack: count() or sum(VALUE), not {e.func}()",
                         f"-e 'count() by ...' for I/Os, 'sum(bytes) by ...' for bytes, "
                         f"'sum({e.value or 'q2c'}) by ...' for time")


def frame_text(text: str) -> str:
    """One frame, safe in a folded line: ';' (the separator) becomes ':', a control character (a newline
    would end the line) '?'; an empty frame '[empty]'."""
    out = _CONTROL.sub("?", text.replace(";", ":"))
    return out if out else "[empty]"


@dataclass(frozen=True)
class FoldedStack:
    """One stack, root first, and its value; kinds[i] says what frames[i] is (KEY, USER or KERNEL)."""

    frames: tuple[str, ...]
    value: int
    kinds: tuple[str, ...] = ()


def _key_frame(name: str, value: object) -> str:
    return frame_text(str(value) if name == "comm" else f"{name}={value}")


def fold_table(t: AggTable) -> list[FoldedStack]:
    """The rows of one table as folded stacks, merged where they fold alike (a ';' replaced can make two
    names one), sorted by their frames."""
    keys = [k for k in t.keys if k not in STACK_KEYS]
    keys.sort(key=lambda k: k != "comm")      # the process first; the others in the expression's order
    merged: dict[tuple[str, ...], FoldedStack] = {}
    for r in t.rows:
        if r.value is None:
            raise ValueError(f"{t.expr}: a distribution has no single value to fold")
        frames = [_key_frame(k, r.keys[k]) for k in keys]
        kinds = [KEY] * len(frames)
        for k, kind in (("ustack", USER), ("kstack", KERNEL)):
            if k in r.keys:
                leaf_first = str(r.keys[k]).split("\n")
                frames += [frame_text(f) for f in reversed(leaf_first)]
                kinds += [kind] * len(leaf_first)
        ft = tuple(frames)
        got = merged.get(ft)
        value = int(r.value) + (got.value if got else 0)
        merged[ft] = FoldedStack(ft, value, tuple(kinds))
    return [merged[f] for f in sorted(merged)]


def merge_folded(stacks: Iterable[FoldedStack]) -> list[FoldedStack]:
    """Stacks of several intervals as one set: the values of equal stacks added, sorted by their frames."""
    merged: dict[tuple[str, ...], FoldedStack] = {}
    for s in stacks:
        got = merged.get(s.frames)
        merged[s.frames] = s if got is None else FoldedStack(s.frames, got.value + s.value, got.kinds)
    return [merged[f] for f in sorted(merged)]


@dataclass(frozen=True)
class FlameNode:
    """One rectangle of a flame graph: a frame at a depth (0: the root, everything), covering
    [start, start + value) of the root's value; self_value is what ends in it (its stacks' leaf)."""

    frame: str
    depth: int
    start: int
    value: int
    self_value: int
    kind: str
    path: tuple[str, ...]   # the frames from the root's child down to this one


def flame_tree(stacks: Sequence[FoldedStack]) -> list[FlameNode]:
    """Folded stacks -> the flame graph's nodes, parents before children; a node's children are in the
    order of their frames' names (as flamegraph.pl sorts them) and, together with its self value, exactly
    as wide as it is."""
    # a trie: frame -> [value, self value, kind, children]
    root: dict[str, list] = {}   # type: ignore[type-arg]
    total = 0
    for s in stacks:
        total += s.value
        level = root
        for i, f in enumerate(s.frames):
            node = level.get(f)
            if node is None:
                node = level[f] = [0, 0, s.kinds[i] if i < len(s.kinds) else KEY, {}]
            node[0] += s.value
            if i == len(s.frames) - 1:
                node[1] += s.value
            level = node[3]
    out = [FlameNode(ROOT, 0, 0, total, total - sum(n[0] for n in root.values()), ROOT, ())]
    todo: list[tuple[dict[str, list], int, int, tuple[str, ...]]] = [(root, 1, 0, ())]  # type: ignore[type-arg]
    while todo:
        level, depth, start, path = todo.pop()
        at = start
        for f in sorted(level):
            value, self_value, kind, children = level[f]
            out.append(FlameNode(f, depth, at, value, self_value, kind, (*path, f)))
            if children:
                todo.append((children, depth + 1, at, (*path, f)))
            at += value
    return out


__all__ = ["FOLDED_FUNCS", "KERNEL", "KEY", "ROOT", "USER", "FlameNode", "FoldedStack", "check_foldable",
           "flame_tree", "fold_table", "frame_text", "merge_folded"]
