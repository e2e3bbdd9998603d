"""ioscope agg's language without root: parsing, one-line errors with columns, the kernel's WHERE program."""

from __future__ import annotations

import itertools
import random
import subprocess

import pytest

from conftest import ioscope_cmd
from ioscope.base.errors import UsageError
from ioscope.engines.aggregate import expr as E


def test_examples_of_the_issue_parse() -> None:
    cases = {
        "count() by comm,disk": ("count", None, ("comm", "disk")),
        "sum(bytes) by comm where op == write": ("sum", "bytes", ("comm",)),
        "quantize(q2c) by disk,op": ("quantize", "q2c", ("disk", "op")),
        "llquantize(d2c) by disk where bytes >= 64k": ("llquantize", "d2c", ("disk",)),
        "avg(q2d) by cgroup": ("avg", "q2d", ("cgroup",)),
        "stddev(seek)": ("stddev", "seek", ()),
        "MIN(inflight) BY cpu, size": ("min", "inflight", ("cpu", "size")),
    }
    for text, (func, value, keys) in cases.items():
        e = E.parse(text)
        assert (e.func, e.value, e.keys) == (func, value, keys), text


def test_literals_and_units() -> None:
    w = E.parse("count() where q2c > 10ms and d2c <= 250us and bytes >= 64k and size < 1M and pid == 42").where
    assert isinstance(w, E.BoolOp) and w.op == "and"
    got = {c.field: (c.op, c.lit.value) for c in w.args if isinstance(c, E.Cmp)}
    assert got == {"q2c": (">", 10_000_000), "d2c": ("<=", 250_000), "bytes": (">=", 65536),
                   "size": ("<", 1 << 20), "pid": ("==", 42)}
    # a literal on the left is turned around
    c = E.parse("count() where 1.5ms < q2c").where
    assert isinstance(c, E.Cmp) and (c.field, c.op, c.lit.value) == ("q2c", ">", 1_500_000)
    c = E.parse("count() where comm == 'my worker'").where
    assert isinstance(c, E.Cmp) and c.lit.value == "my worker"


def test_precedence_and_parentheses() -> None:
    w = E.parse("count() where op == read or op == write and not bytes < 4k").where
    assert isinstance(w, E.BoolOp) and w.op == "or"
    assert isinstance(w.args[1], E.BoolOp) and w.args[1].op == "and"
    assert isinstance(w.args[1].args[1], E.Not)
    w = E.parse("count() where (op == read or op == write) && !(bytes < 4k)").where
    assert isinstance(w, E.BoolOp) and w.op == "and" and isinstance(w.args[0], E.BoolOp)


@pytest.mark.parametrize("text,col,words", [
    ("count() by comn", 12, "unknown key 'comn'"),
    ("cnt()", 1, "unknown function 'cnt'"),
    ("sum(comm)", 5, "'comm' is a key, not a value"),
    ("count() by q2c", 12, "'q2c' is a value, not a key"),
    ("count() where (op == read", 26, "unbalanced '('"),
    ("count() where op == read)", 25, "unbalanced ')'"),
    ("count() where disk == 3", 23, "compare it with a string"),
    ("count() where pid == \"x\"", 22, "cannot compare it with the string"),
    ("count() where bytes > 10ms", 23, "'bytes' is not a time"),
    ("count() where q2c > 4k", 21, "'q2c' is not a size"),
    ("count() where op < write", 18, "only == and != compare it"),
    ("count() where d2c = 3", 19, "'=' is not a comparison"),
    ("count() where q2c > 3parsec", 21, "unknown unit"),
    ("count(bytes)", 7, "count() takes no value"),
    ("sum()", 5, "expected a value"),
    ("lquantize(q2c, 0, 10ms)", 23, "lquantize's step"),
    ("lquantize(q2c, 10ms, 0, 1ms)", 1, "LOW < HIGH"),
    ("lquantize(q2c, 0, 1s, 1us)", 1, "buckets"),
    ("count() by comm,", 17, "expected a key"),
    ("count() by comm,comm", 17, "given twice"),
    ("count() where ustack == \"x\"", 15, "a key only"),
    ("count() where file == \"/a\"", 15, "a key only"),
    ("count() where kstack != 3", 15, "a key only"),
    ("count() where q2c > ", 21, "expected a key, a value or a literal"),
    ("count() where q2c", 18, "expected a comparison"),
    ("count() where q2c > d2c", 21, "not with 'd2c'"),
    ("count() where 'unterminated", 15, "unterminated string"),
    ("count() extra", 9, "expected 'by', 'where' or the end"),
    ("", 1, "empty expression"),
])
def test_errors_point_at_the_column(text: str, col: int, words: str) -> None:
    with pytest.raises(E.ExprError) as ei:
        E.parse(text)
    msg = str(ei.value)
    assert words in msg and f"at column {col}" in msg, msg
    assert "\n" not in msg


def test_too_many_expressions_and_conditions() -> None:
    with pytest.raises(UsageError):
        E.parse_all(["count()"] * (E.MAX_EXPRS + 1))
    long = "count() where " + " or ".join(["pid == 1"] * 40)
    with pytest.raises(E.ExprError):
        E.parse(long)
    half = "count() where " + " or ".join(["pid == 1"] * 20)  # 39 instructions each: fine alone, not both
    E.parse(half)
    with pytest.raises(UsageError):
        E.parse_all([half, half])


def _direct(c: E.Cond, rec: dict[str, int | None], strings: dict[str, int]) -> bool:
    """The meaning of a condition, evaluated on the tree (a missing value makes a comparison false)."""
    if isinstance(c, E.Cmp):
        if c.field == "comm":
            ok = rec.get("comm_name") is not None and rec["comm_name"] == strings[str(c.lit.value)]
            return ok if c.op == "==" else not ok
        v = rec.get(c.field)
        imm = strings[str(c.lit.value)] if c.lit.kind == "str" else int(c.lit.value)
        return v is not None and E.compare(v, c.op, imm)
    if isinstance(c, E.Not):
        return not _direct(c.arg, rec, strings)
    vals = [_direct(a, rec, strings) for a in c.args]
    return all(vals) if c.op == "and" else any(vals)


def test_kernel_program_means_the_condition() -> None:
    """The postfix program (what the kernel runs) agrees with the tree on every record tried."""
    strings = {"read": 0, "write": 1, "dd": 11, "fio": 12}
    conds = [
        "op == read", "not op == write", "bytes >= 64k and q2c > 1ms", "(op == read or op == write) and d2c < 2ms",
        "not (bytes < 4k or q2d > 100us) and comm == \"dd\"", "comm != \"fio\" or pid == 7",
        "q2c > 1ms or d2c > 1ms and not op == read", "not not bytes == 4k",
    ]
    names = {11: "dd", 12: "fio"}
    rng = random.Random(7)
    for text in conds:
        c = E.parse("count() where " + text).where
        assert c is not None
        prog = E.compile_cond(c, lambda f, lit: strings[str(lit.value)])
        for _ in range(300):
            comm = rng.choice([11, 12, None])
            rec: dict[str, int | None] = {
                "op": rng.choice([0, 1]), "bytes": rng.choice([512, 4096, 65536, 1 << 20]),
                "q2c": rng.choice([None, 10_000, 2_000_000]), "d2c": rng.choice([None, 500_000, 3_000_000]),
                "q2d": rng.choice([None, 50_000, 500_000]), "pid": rng.choice([7, 8]), "comm_name": comm,
            }
            if comm is not None:
                raw = names[comm].encode().ljust(16, b"\0")
                rec["comm0"], rec["comm1"] = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
            assert E.run_program(prog, rec) == _direct(c, rec, strings), (text, rec)


def test_program_size_matches_compiled_length() -> None:
    for text in ["op == read", "comm == \"x\"", "comm != \"x\" and not (pid == 1 or pid == 2)"]:
        c = E.parse("count() where " + text).where
        assert c is not None
        n, _depth = E.program_size(c)
        assert n >= len(E.compile_cond(c, lambda f, lit: 0))


@pytest.mark.parametrize("expr,words", [
    ("hist(d2c) by disk", "unknown function 'hist' at column 1; agg's quantize(VALUE) is what bpftrace"),
    ("lhist(bytes, 0, 64k, 4k)", "agg's lquantize(VALUE, LOW, HIGH, STEP) is what bpftrace or DTrace call lhist"),
    ("count() by execname", "unknown key 'execname' at column 12; agg's comm is what"),
    ("count() where execname == \"fio\"", "at column 15; agg's comm is what"),
    ("count() where args->dev == 7", "'args->dev' is a bpftrace tracepoint argument at column 15; agg's disk"),
    ("sum(args->bytes) by comm", "'args->bytes' is a bpftrace tracepoint argument at column 5; agg's is bytes"),
    ("@[comm] = count()", "unexpected character '@' at column 1; that is bpftrace's language"),
    ("count() by comn", "unknown key 'comn' at column 12; keys are disk, op"),
    ("sum(x", "unknown value 'x' at column 5"),
    ("count() where (op == read", "unbalanced '('"),
    ("count() where disk == 5", "'disk' is a name"),
])
def test_command_line_errors(expr: str, words: str) -> None:
    """What the user sees: one line on stderr, exit 2, no traceback, nothing attached (no root needed)."""
    p = subprocess.run(ioscope_cmd("agg", "-e", expr), capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ioscope agg: error: ") and words in lines[0], p.stderr
    assert "Traceback" not in p.stderr and not p.stdout


def test_every_combination_of_function_and_value_parses() -> None:
    """Every function of every value by every key it may have: an I/O's every key, an I/O wait's own."""
    for func, value in itertools.product(E.FUNCS, E.VALUES):
        if func == "count":
            continue
        text = f"{func}({value}, 0, 100, 10)" if func == "lquantize" else f"{func}({value})"
        keys = tuple(k for k in E.KEYS if k in E.WAIT_FIELDS) if value in E.WAIT_VALUES else tuple(E.KEYS)
        e = E.parse(text + " by " + ",".join(keys))
        assert e.func == func and e.value == value and e.keys == keys
        assert e.on_waits == (value in E.WAIT_VALUES)


@pytest.mark.parametrize("text, word", [
    ("sum(iowait) by disk", "disk"),
    ("count() by comm where iowait > 1ms and op == write", "op"),
    ("quantize(iowait) by file", "file"),
    ("sum(swapin) by disk", "disk"),
    ("count() by comm where swapin > 0 and size > 4k", "size"),
])
def test_an_io_wait_has_no_disk_op_or_file(text: str, word: str) -> None:
    with pytest.raises(E.ExprError) as e:
        E.parse(text)
    assert f"'{word}' is not known of an I/O wait" in str(e.value)


@pytest.mark.parametrize("value", ["iowait", "swapin"])
def test_a_trigger_cannot_read_a_wait(value: str) -> None:
    with pytest.raises(E.ExprError) as e:
        E.parse_condition(f"disk == \"sda\" and {value} > 1s")
    assert f"a condition fires on an I/O, and {value} is a value of a thread's I/O wait" in str(e.value)
    assert e.value.col == len('disk == "sda" and ') + 1


def test_help_examples_are_on_the_doc_page() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "agg.md").read_text()
    h = subprocess.run(ioscope_cmd("agg", "--help"), capture_output=True, text=True, timeout=30, check=True).stdout
    lines = h.split("examples:")[1].strip().splitlines()
    assert len(lines) >= 5
    for line in lines:
        assert line.split("#")[0].strip() in doc, line
    for key in E.KEYS:
        assert f"| `{key}` |" in doc, key
    for value in E.VALUES:
        assert f"| `{value}` |" in doc, value
    for func in E.FUNCS:
        assert f"`{func}(" in doc, func


def test_unknown_disk_in_a_condition() -> None:
    p = subprocess.run(ioscope_cmd("agg", "-e", 'count() where disk == "nosuchdisk"'), capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "unknown disk 'nosuchdisk' at column 23; name a disk in /sys/block" in p.stderr


def test_comm_globs_are_split_from_the_kernels_condition() -> None:
    """A glob on comm leaves the kernel's program (which compares comm as two words) and is matched per
    process in user space; it must hold for the whole condition, so only at the top or joined by 'and'."""
    e = E.parse('count() where comm == "kworker*"')
    assert e.kernel_where is None and [g.lit.value for g in e.globs] == ["kworker*"]
    e = E.parse('count() where op == write and comm != "k?orker/[0-9]*" and bytes > 4k')
    assert [(g.op, g.lit.value) for g in e.globs] == [("!=", "k?orker/[0-9]*")]
    plain = E.parse("count() where op == write and bytes > 4k").where
    assert e.kernel_where is not None and plain is not None

    def resolve(f: str, lit: E.Literal) -> int:
        return 1

    assert E.compile_cond(e.kernel_where, resolve) == E.compile_cond(plain, resolve)
    exact = E.parse('count() where comm == "kworker"')
    assert exact.globs == () and exact.kernel_where == exact.where
    assert E.glob_match(E.parse('count() where comm == "kw*"').globs, "kworker/u8:6")
    assert not E.glob_match(E.parse('count() where comm == "kw*"').globs, "dd")
    assert not E.glob_match(E.parse('count() where comm != "kw*"').globs, "kworker/u8:6")
    for text, col in [('count() where op == read or comm == "k*"', 29), ('count() where not comm == "k*"', 19),
                      ('count() where (comm == "k*" or pid == 1) and op == read', 16)]:
        with pytest.raises(E.ExprError, match=f"cannot be under 'or' or 'not' at column {col}"):
            E.parse(text)


def test_a_condition_decided_for_an_io_still_in_flight() -> None:
    """expr.decide: a time only grows while the I/O is out, so 'q2c > 2s' is true once 2 s have passed and
    stays so; a field the I/O has not got yet (bytes, op) leaves the condition open, unless the rest decides
    it; a known field that fails decides it false."""
    from ioscope.engines.aggregate.expr import decide, parse_condition, time_floor
    s = 1_000_000_000

    def d(text: str, known: dict[str, int | str], lower: dict[str, int]) -> bool | None:
        return decide(parse_condition(text), known, lower)

    assert d("q2c > 2s", {}, {"q2c": 3 * s}) is True
    assert d("q2c > 2s", {}, {"q2c": 2 * s}) is None          # not yet: it may pass 2 s later
    assert d("q2c >= 2s", {}, {"q2c": 2 * s}) is True
    assert d("q2c < 2s", {}, {"q2c": 2 * s}) is False         # it can never come back under
    assert d("q2c < 2s", {}, {"q2c": s}) is None
    assert d("not (q2c <= 500ms)", {}, {"q2c": s}) is True
    assert d("q2c != 1s", {}, {"q2c": 2 * s}) is True
    assert d("q2c == 1s", {}, {"q2c": 2 * s}) is False
    assert d('q2c > 2s and disk == "sdb"', {"disk": "sdb"}, {"q2c": 3 * s}) is True
    assert d('q2c > 2s and disk == "sdb"', {"disk": "sda"}, {"q2c": 3 * s}) is False
    assert d("q2c > 2s and bytes > 1M", {"disk": "sda"}, {"q2c": 3 * s}) is None   # its size: at completion
    assert d("q2c > 2s or bytes > 1M", {"disk": "sda"}, {"q2c": 3 * s}) is True
    assert d("d2c > 1s", {}, {"q2c": 3 * s}) is None           # not issued, or no issue stamp: open
    assert d("q2d > 1s", {"q2d": 2 * s}, {"q2c": 3 * s}) is True   # issued: q2d is final
    assert d('q2c > 1s and comm == "post*"', {"comm": "postgres"}, {"q2c": 2 * s}) is True
    assert d('q2c > 1s and comm != "post*"', {"comm": "postgres"}, {"q2c": 2 * s}) is False
    assert d("q2c > 1s and tgid == 42", {"tgid": 42}, {"q2c": 2 * s}) is True
    # the smallest time a condition names: no younger I/O can make it true by its age
    assert time_floor(parse_condition("q2c > 2s or (d2c > 500ms and disk == sda)")) == s // 2
    assert time_floor(parse_condition('bytes > 1M and comm == "dd"')) is None
