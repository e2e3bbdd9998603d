"""The language of `ioscope agg`: `FUNC(VALUE) [by KEY[,KEY]...] [where COND]`.

Pure Python (no numpy, no kernel): the parser, the checks that give one-line errors pointing at
a column, and the compiler of a WHERE condition into the small postfix program the kernel
evaluates (bpf/agg.h: struct agg_insn). Capture mode evaluates the same tree over columns
(lib/ioscope/engines/aggregate/capture.py).

    expr  := FUNC '(' [VALUE [',' NUM ',' NUM ',' NUM]] ')' ['by' KEY (',' KEY)*] ['where' cond]
    cond  := and ('or' and)*          ('||' too)
    and   := unary ('and' unary)*     ('&&' too)
    unary := 'not' unary | '!' unary | '(' cond ')' | cmp
    cmp   := operand ('=='|'!='|'<'|'<='|'>'|'>=') operand   (one side a KEY or VALUE, the other a literal)
    literal: 123, 10ms, 250us, 2s, 64k, 1M, 1.5g, "text", 'text', or a bare word (write, sync)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ioscope.base.errors import UsageError

# FUNC -> number of literal arguments after the value (None: takes no value)
FUNCS: dict[str, int | None] = {
    "count": None, "sum": 0, "avg": 0, "min": 0, "max": 0, "stddev": 0,
    "quantize": 0, "lquantize": 3, "llquantize": 0,
}
HIST_FUNCS = ("quantize", "lquantize", "llquantize")

# VALUE -> unit: "ns" (durations), "bytes", "sectors", "count"
VALUES: dict[str, str] = {
    "bytes": "bytes", "q2c": "ns", "q2d": "ns", "d2c": "ns", "seek": "sectors", "inflight": "count", "throttle": "ns",
    "iowait": "ns", "swapin": "ns",
}
# iowait and swapin are values of a thread's I/O wait, not of an I/O: an expression that reads one is answered
# from the waits that ended (one record each, bpf/iowait.bpf.h), and may read only what a wait has. swapin is
# the wait's time when it was a swap-in (iotop's SWAPIN), absent from the other waits
WAIT_VALUES = ("iowait", "swapin")
WAIT_FIELDS = ("comm", "pid", "tgid", "cgroup", "kstack", "ustack", *WAIT_VALUES)
# KEY -> kind: "str" (compared with strings) or the unit of a number
KEYS: dict[str, str] = {
    "disk": "str", "op": "str", "flags": "str", "comm": "str", "pid": "count", "tgid": "count",
    "cgroup": "str", "cpu": "count", "size": "bytes", "kstack": "keyonly", "file": "keyonly",
    "ustack": "keyonly",
}
STACK_KEYS = ("kstack", "ustack")  # multi-line keys: one frame a line, leaf first

# bpftrace's and DTrace's words for what agg has under another name: the error points to agg's
FOREIGN: dict[str, str] = {
    "hist": "quantize(VALUE)", "lhist": "lquantize(VALUE, LOW, HIGH, STEP)",
    "stats": "avg(VALUE) (and count(), sum(VALUE))", "execname": "comm", "tid": "pid", "dev": "disk",
    "device": "disk", "rwbs": "op (or flags)", "nr_sector": "bytes", "nr_bytes": "bytes", "bcount": "bytes",
    "b_bcount": "bytes", "probefunc": "kstack", "curtask": "comm, pid or tgid", "cgroupid": "cgroup",
}


def foreign_hint(word: str) -> str | None:
    """'bpftrace's X is agg's Y' for a word agg spells otherwise (args->dev: 'dev')."""
    to = FOREIGN.get(word.lower())
    if to is None:
        return None
    return f"agg's {to} is what bpftrace or DTrace call {word} (a bpftrace program runs as it is with --bpftrace)"


CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")
FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

TIME_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
SIZE_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
              "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

MAX_EXPRS = 8       # bpf/agg.h AGG_MAX_EXPRS
MAX_INSNS = 64      # bpf/agg.h AGG_MAX_INSNS, shared by every expression's condition
MAX_STACK = 32      # the kernel's evaluation stack is a 32-bit word
LQ_MAX_BUCKETS = 300  # lquantize buckets in struct hist (304 slots: underflow, 300, overflow)


class ExprError(UsageError):
    """A bad expression: one line, with the column (1-based) of the offending word."""

    def __init__(self, msg: str, col: int, hint: str | None = None) -> None:
        self.msg, self.col = msg, col
        super().__init__(f"{msg} at column {col}", hint)


# -- tokens ---------------------------------------------------------------

@dataclass(frozen=True)
class Tok:
    kind: str  # "name", "num", "str", "op", "end"
    text: str
    col: int   # 1-based


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+(?:\.\d+)?[A-Za-z]*)
  | (?P<bt>args\s*(?:->|\.)\s*[A-Za-z_][A-Za-z0-9_]*|args\s*\[\s*\d+\s*\]\s*->\s*[A-Za-z_][A-Za-z0-9_]*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>"[^"]*"|'[^']*')
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>()!,])
""", re.VERBOSE)


def tokenize(text: str) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            ch = text[pos]
            if ch in "\"'":
                raise ExprError(f"unterminated string starting with {ch}", pos + 1)
            if ch == "=":
                raise ExprError("'=' is not a comparison (use '==')", pos + 1)
            if ch in "@{/$":
                raise ExprError(f"unexpected character '{ch}'", pos + 1,
                                "that is bpftrace's language: run a bpftrace program with --bpftrace 'PROGRAM'")
            raise ExprError(f"unexpected character '{ch}'", pos + 1)
        kind = m.lastgroup or ""
        if kind == "bt":
            field_name = re.split(r"->|\.", m.group())[-1].strip()
            hint = foreign_hint(field_name) or (
                f"agg's keys are {', '.join(KEYS)}; values are {', '.join(VALUES)}"
                if field_name.lower() not in KEYS and field_name.lower() not in VALUES
                else f"agg's is {field_name.lower()}")
            raise ExprError(f"'{m.group()}' is a bpftrace tracepoint argument", pos + 1, hint)
        if kind != "ws":
            out.append(Tok(kind, m.group(), pos + 1))
        pos = m.end()
    out.append(Tok("end", "", len(text) + 1))
    return out


# -- the tree ---------------------------------------------------------------

@dataclass(frozen=True)
class Literal:
    kind: str        # "num" or "str"
    value: int | str
    unit: str        # for numbers: "ns", "bytes" or "" (a plain number); "" for strings
    text: str
    col: int


@dataclass(frozen=True)
class Cmp:
    field: str       # a KEY or a VALUE
    op: str          # one of CMP_OPS, field on the left
    lit: Literal
    col: int


@dataclass(frozen=True)
class Not:
    arg: Cond


@dataclass(frozen=True)
class BoolOp:
    op: str          # "and" or "or"
    args: tuple[Cond, ...]


Cond = Cmp | Not | BoolOp


@dataclass(frozen=True)
class Expr:
    text: str
    func: str
    value: str | None                       # None for count()
    keys: tuple[str, ...] = ()
    where: Cond | None = None
    lq: tuple[int, int, int] | None = None  # lquantize's (low, high, step)
    key_cols: tuple[int, ...] = field(default=(), compare=False)

    @property
    def globs(self) -> tuple[Cmp, ...]:
        """The WHERE's comparisons of comm with a glob ("kworker*"), matched in user space."""
        return split_globs(self.where)[1]

    @property
    def kernel_where(self) -> Cond | None:
        """The WHERE the kernel evaluates: the condition without its globs."""
        return split_globs(self.where)[0]

    @property
    def on_waits(self) -> bool:
        """Answered from the threads' I/O waits (it reads iowait or swapin), not from the I/O."""
        return not self.fields().isdisjoint(WAIT_VALUES)

    @property
    def is_hist(self) -> bool:
        return self.func in HIST_FUNCS

    @property
    def unit(self) -> str:
        return VALUES[self.value] if self.value else "count"

    def fields(self) -> set[str]:
        """Every KEY and VALUE the expression reads."""
        out = set(self.keys)
        if self.value:
            out.add(self.value)
        if self.where is not None:
            out |= cond_fields(self.where)
        return out


GLOB_CHARS = "*?["


def is_glob(c: Cond) -> bool:
    """comm == "kworker*": a comparison of comm with a shell-style pattern (*, ?, [...])."""
    return (isinstance(c, Cmp) and c.field == "comm" and c.lit.kind == "str"
            and any(ch in str(c.lit.value) for ch in GLOB_CHARS))


def _find_glob(c: Cond) -> Cmp | None:
    if isinstance(c, Cmp):
        return c if is_glob(c) else None
    if isinstance(c, Not):
        return _find_glob(c.arg)
    for a in c.args:
        got = _find_glob(a)
        if got is not None:
            return got
    return None


def split_globs(c: Cond | None) -> tuple[Cond | None, tuple[Cmp, ...]]:
    """(the condition without its comm globs, the globs). A glob is matched in user space against the
    process name of each row (the kernel compares comm as two 8-byte words, equal or not), so it must
    hold for the whole condition: the condition itself, or one of the terms joined by 'and' at the top."""
    if c is None:
        return None, ()
    if is_glob(c):
        assert isinstance(c, Cmp)
        return None, (c,)
    terms = list(c.args) if isinstance(c, BoolOp) and c.op == "and" else [c]
    globs = tuple(t for t in terms if isinstance(t, Cmp) and is_glob(t))
    rest = [t for t in terms if not is_glob(t)]
    for t in rest:
        inner = _find_glob(t)
        if inner is not None:
            raise ExprError(f"the glob {inner.lit.text} cannot be under 'or' or 'not'", inner.col,
                            "globs on comm are matched per process in user space: join them with 'and' at "
                            "the top of the condition, or use != for 'not'")
    if not globs:
        return c, ()
    kernel: Cond | None = rest[0] if len(rest) == 1 else BoolOp("and", tuple(rest)) if rest else None
    return kernel, globs


def glob_match(globs: Iterable[Cmp], comm: str) -> bool:
    """Whether a process named comm passes every glob (== matches, != does not)."""
    from fnmatch import fnmatchcase
    return all(fnmatchcase(comm, str(g.lit.value)) == (g.op == "==") for g in globs)


def cond_fields(c: Cond) -> set[str]:
    if isinstance(c, Cmp):
        return {c.field}
    if isinstance(c, Not):
        return cond_fields(c.arg)
    out: set[str] = set()
    for a in c.args:
        out |= cond_fields(a)
    return out


# -- a condition on an I/O still in flight ---------------------------------------

TIME_VALUES = ("q2c", "q2d", "d2c")  # the times that only grow while an I/O is out


def time_floor(c: Cond) -> int | None:
    """The smallest time (ns) a comparison of q2c, q2d or d2c names in c: no I/O younger than that can make
    c true by its age alone; None when c reads none of them (it cannot be decided while the I/O is out)."""
    if isinstance(c, Cmp):
        return int(c.lit.value) if c.field in TIME_VALUES and c.lit.kind == "num" else None
    floors = [f for a in ((c.arg,) if isinstance(c, Not) else c.args) if (f := time_floor(a)) is not None]
    return min(floors) if floors else None


def _decide_cmp(c: Cmp, known: dict[str, int | str], lower: dict[str, int]) -> bool | None:
    if c.field in known:
        v = known[c.field]
        if isinstance(v, str):
            if is_glob(c):
                return glob_match((c,), v)
            return (v == c.lit.value) == (c.op == "==")
        return compare(v, c.op, int(c.lit.value))
    if c.field not in lower:
        return None
    lo, x = lower[c.field], int(c.lit.value)  # the value is lo or more: it can only grow
    if c.op in (">", ">=", "!="):
        return True if compare(lo, c.op if c.op != "!=" else ">", x) else None
    return False if (lo >= x if c.op == "<" else lo > x) else None


def decide(c: Cond, known: dict[str, int | str], lower: dict[str, int]) -> bool | None:
    """Whether c holds for an I/O that is still in flight, whatever the rest of its life: known holds its
    fields that are final (disk, tgid, comm; q2d once it was issued), lower the times that are at least
    that much now and can only grow (q2c, d2c, q2d before its issue). True: c holds however it ends; False:
    it cannot; None: not known yet (a field it has not got, such as its size or op to the slot table, or a
    time still below the threshold). Kleene's three-valued and, or and not."""
    if isinstance(c, Cmp):
        return _decide_cmp(c, known, lower)
    if isinstance(c, Not):
        v = decide(c.arg, known, lower)
        return None if v is None else not v
    vals = [decide(a, known, lower) for a in c.args]
    if c.op == "and":
        return False if False in vals else None if None in vals else True
    return True if True in vals else None if None in vals else False


# -- the parser ---------------------------------------------------------------

def _names(d: Iterable[str]) -> str:
    return ", ".join(d)


def parse_literal_number(text: str, col: int) -> Literal:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", text)
    assert m is not None
    num, suffix = float(m[1]), m[2].lower()
    if not suffix:
        if "." in m[1]:
            raise ExprError(f"'{text}' needs a unit (ns, us, ms, s, k, M, G) to be a fraction", col)
        return Literal("num", int(m[1]), "", text, col)
    if suffix in TIME_UNITS:
        return Literal("num", round(num * TIME_UNITS[suffix]), "ns", text, col)
    if suffix in SIZE_UNITS:
        return Literal("num", round(num * SIZE_UNITS[suffix]), "bytes", text, col)
    raise ExprError(f"unknown unit '{m[2]}' in '{text}'", col,
                    "times take ns, us, ms, s; sizes take k, M, G")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def next(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str, what: str) -> Tok:
        t = self.tok
        if t.text != text or t.kind == "str":
            raise ExprError(f"expected {what}, found {_found(t)}", t.col)
        return self.next()

    def parse(self) -> Expr:
        t = self.next()
        if t.kind != "name":
            raise ExprError(f"expected a function, found {_found(t)}", t.col, f"functions are {_names(FUNCS)}")
        func = t.text.lower()
        if func not in FUNCS:
            raise ExprError(f"unknown function '{t.text}'", t.col,
                            foreign_hint(t.text) or f"functions are {_names(FUNCS)}")
        self.expect("(", f"'(' after {func}")
        value: str | None = None
        lq: tuple[int, int, int] | None = None
        nargs = FUNCS[func]
        if nargs is None:
            if self.tok.text != ")":
                raise ExprError(f"count() takes no value, found {_found(self.tok)}", self.tok.col)
        else:
            value = self.value_name()
            if nargs:
                args = []
                for what in ("low", "high", "step"):
                    self.expect(",", f"',' and lquantize's {what} (lquantize(VALUE, LOW, HIGH, STEP))")
                    args.append(self.number_arg(func, value, what))
                lq = self.check_lq(args, t.col)
        self.expect(")", f"')' to close {func}(")
        keys: list[str] = []
        key_cols: list[int] = []
        where: Cond | None = None
        if self.tok.kind == "name" and self.tok.text.lower() == "by":
            self.next()
            while True:
                kt = self.next()
                keys.append(self.key_name(kt))
                key_cols.append(kt.col)
                if kt.text.lower() in keys[:-1]:
                    raise ExprError(f"key '{kt.text}' given twice", kt.col)
                if self.tok.text != ",":
                    break
                self.next()
        if self.tok.kind == "name" and self.tok.text.lower() == "where":
            self.next()
            where = self.cond()
        if self.tok.kind != "end":
            expected = "'by', 'where' or the end" if not keys and where is None else (
                "',' or 'where' or the end" if where is None else "'and', 'or' or the end")
            if self.tok.text == ")":
                raise ExprError("unbalanced ')'", self.tok.col)
            raise ExprError(f"expected {expected}, found {_found(self.tok)}", self.tok.col)
        if where is not None:
            kernel, _globs = split_globs(where)
            if kernel is not None:
                check_program_size(kernel, self.text)
        e = Expr(self.text, func, value, tuple(keys), where, lq, tuple(key_cols))
        if e.on_waits:
            other = sorted(e.fields() - set(WAIT_FIELDS))
            if other:
                col = self.text.lower().find(other[0]) + 1 or 1
                raise ExprError(f"'{other[0]}' is not known of an I/O wait", col,
                                "an expression that reads iowait or swapin is answered from the threads' I/O waits, "
                                f"which have {_names(WAIT_FIELDS)}; ask of the I/O in another -e")
        return e

    def value_name(self) -> str:
        t = self.next()
        name = t.text.lower()
        if t.kind == "name" and name in VALUES:
            return name
        if t.kind == "name" and name in KEYS:
            raise ExprError(f"'{t.text}' is a key, not a value", t.col,
                            f"values are {_names(VALUES)}; use it after 'by'")
        if t.kind == "name":
            raise ExprError(f"unknown value '{t.text}'", t.col, foreign_hint(t.text) or f"values are {_names(VALUES)}")
        raise ExprError(f"expected a value, found {_found(t)}", t.col, f"values are {_names(VALUES)}")

    def number_arg(self, func: str, value: str, what: str) -> int:
        t = self.next()
        if t.kind != "num":
            raise ExprError(f"expected a number for {func}'s {what}, found {_found(t)}", t.col)
        lit = parse_literal_number(t.text, t.col)
        _check_unit(value, lit)
        return int(lit.value)

    def check_lq(self, args: list[int], col: int) -> tuple[int, int, int]:
        low, high, step = args
        if step <= 0 or high <= low:
            raise ExprError("lquantize needs LOW < HIGH and STEP > 0", col)
        n = -(-(high - low) // step)
        if n > LQ_MAX_BUCKETS:
            raise ExprError(f"lquantize would have {n} buckets, at most {LQ_MAX_BUCKETS}", col,
                            "use a larger step, or llquantize")
        return low, high, step

    def key_name(self, t: Tok) -> str:
        name = t.text.lower()
        if t.kind == "name" and name in KEYS:
            return name
        if t.kind == "name" and name in VALUES:
            raise ExprError(f"'{t.text}' is a value, not a key", t.col,
                            f"keys are {_names(KEYS)}; aggregate it with a function, or use size")
        if t.kind == "name":
            raise ExprError(f"unknown key '{t.text}'", t.col, foreign_hint(t.text) or f"keys are {_names(KEYS)}")
        raise ExprError(f"expected a key after 'by', found {_found(t)}", t.col, f"keys are {_names(KEYS)}")

    # conditions
    def cond(self) -> Cond:
        args = [self.and_()]
        while self.tok.text.lower() in ("or", "||") and self.tok.kind in ("name", "op"):
            self.next()
            args.append(self.and_())
        return args[0] if len(args) == 1 else BoolOp("or", tuple(args))

    def and_(self) -> Cond:
        args = [self.unary()]
        while self.tok.text.lower() in ("and", "&&") and self.tok.kind in ("name", "op"):
            self.next()
            args.append(self.unary())
        return args[0] if len(args) == 1 else BoolOp("and", tuple(args))

    def unary(self) -> Cond:
        t = self.tok
        if (t.kind == "name" and t.text.lower() == "not") or (t.kind == "op" and t.text == "!"):
            self.next()
            return Not(self.unary())
        if t.text == "(" and t.kind == "op":
            self.next()
            c = self.cond()
            if self.tok.text != ")":
                raise ExprError(f"unbalanced '(' (opened at column {t.col}): expected ')', found "
                                f"{_found(self.tok)}", self.tok.col)
            self.next()
            return c
        return self.cmp()

    def operand(self) -> tuple[str, Tok]:
        """('field', tok) or ('lit', tok)."""
        t = self.next()
        if t.kind == "name" and (t.text.lower() in KEYS or t.text.lower() in VALUES):
            return "field", t
        if t.kind in ("num", "str", "name"):
            return "lit", t
        raise ExprError(f"expected a key, a value or a literal, found {_found(t)}", t.col)

    def cmp(self) -> Cmp:
        lk, lt = self.operand()
        ot = self.tok
        if ot.kind != "op" or ot.text not in CMP_OPS:
            if lk == "lit" and lt.kind == "name":
                raise ExprError(f"unknown key or value '{lt.text}'", lt.col, foreign_hint(lt.text)
                                or f"keys are {_names(KEYS)}; values are {_names(VALUES)}")
            raise ExprError(f"expected a comparison ({' '.join(CMP_OPS)}), found {_found(ot)}", ot.col)
        self.next()
        rk, rt = self.operand()
        op = ot.text
        if lk == "field" and rk == "field":
            # a bare word that is also a field name on the right: op == write is fine; disk == pid is not
            raise ExprError(f"compare '{lt.text}' with a literal, not with '{rt.text}'", rt.col)
        if lk == "lit" and rk == "lit":
            if lt.kind == "name":
                raise ExprError(f"unknown key or value '{lt.text}'", lt.col, foreign_hint(lt.text)
                                or f"keys are {_names(KEYS)}; values are {_names(VALUES)}")
            raise ExprError(f"one side of '{op}' must be a key or a value", lt.col)
        if lk == "lit":
            lt, rt, op = rt, lt, FLIP[op]
        fname = lt.text.lower()
        lit = make_literal(rt)
        check_cmp(fname, op, lit, lt.col, ot.col)
        return Cmp(fname, op, lit, lt.col)


def _found(t: Tok) -> str:
    return "the end" if t.kind == "end" else f"'{t.text}'"


def make_literal(t: Tok) -> Literal:
    if t.kind == "num":
        return parse_literal_number(t.text, t.col)
    if t.kind == "str":
        return Literal("str", t.text[1:-1], "", t.text, t.col)
    return Literal("str", t.text, "", t.text, t.col)  # a bare word: write, sync, loop0


def _field_kind(name: str) -> str:
    return KEYS.get(name) or VALUES[name]


def _check_unit(fname: str, lit: Literal) -> None:
    kind = _field_kind(fname)
    if lit.unit == "ns" and kind != "ns":
        raise ExprError(f"'{fname}' is not a time; cannot compare it with {lit.text}", lit.col)
    if lit.unit == "bytes" and kind != "bytes":
        raise ExprError(f"'{fname}' is not a size; cannot compare it with {lit.text}", lit.col)


def check_cmp(fname: str, op: str, lit: Literal, fcol: int, ocol: int) -> None:
    kind = _field_kind(fname)
    if kind == "keyonly":
        raise ExprError(f"'{fname}' is a key only: it cannot be compared", fcol)
    if kind == "str":
        if lit.kind != "str":
            raise ExprError(f"'{fname}' is a name; compare it with a string (\"...\"), not {lit.text}", lit.col)
        if op not in ("==", "!="):
            raise ExprError(f"'{fname}' is a name: only == and != compare it, not {op}", ocol)
        return
    if lit.kind == "str":
        raise ExprError(f"'{fname}' is a number; cannot compare it with the string {lit.text}", lit.col)
    _check_unit(fname, lit)


def check_program_size(c: Cond, text: str) -> None:
    n, depth = program_size(c)
    if n > MAX_INSNS or depth > MAX_STACK:
        raise ExprError("condition too long for the kernel", 1,
                        f"at most {MAX_INSNS} comparisons and operators")


def program_size(c: Cond) -> tuple[int, int]:
    """(instructions, stack depth) of the postfix program for c (comm takes three instructions)."""
    if isinstance(c, Cmp):
        return (4 if c.field == "comm" else 1), 2 if c.field == "comm" else 1
    if isinstance(c, Not):
        n, d = program_size(c.arg)
        return n + 1, d
    n, d = 0, 0
    for i, a in enumerate(c.args):
        an, ad = program_size(a)
        n += an + (1 if i else 0)
        d = max(d, ad + (1 if i else 0))
    return n, d


def parse(text: str) -> Expr:
    """Parse one expression; ExprError (a UsageError: exit 2) pointing at the column otherwise."""
    if not text.strip():
        raise ExprError("empty expression", 1, "e.g. 'count() by comm,disk'")
    return _Parser(text).parse()


def parse_condition(text: str) -> Cond:
    """A condition alone (record --trigger): COND, or COND where COND, read as COND and COND (the
    words of an aggregation's WHERE); ExprError pointing at the column otherwise."""
    if not text.strip():
        raise ExprError("empty condition", 1, "e.g. 'q2c > 500ms' or 'd2c > 100ms where disk == \"sda\"'")
    p = _Parser(text)
    c = p.cond()
    if p.tok.kind == "name" and p.tok.text.lower() == "where":
        p.next()
        c = BoolOp("and", (c, p.cond()))
    if p.tok.kind != "end":
        if p.tok.text == ")":
            raise ExprError("unbalanced ')'", p.tok.col)
        raise ExprError(f"expected 'and', 'or', 'where' or the end, found {_found(p.tok)}", p.tok.col)
    for w in WAIT_VALUES:
        if w in cond_fields(c):
            raise ExprError(f"a condition fires on an I/O, and {w} is a value of a thread's I/O wait",
                            text.lower().find(w) + 1, f"agg -e 'quantize({w}) by comm' shows who waits")
    kernel, _globs = split_globs(c)
    if kernel is not None:
        check_program_size(kernel, text)
    return c


def parse_all(texts: list[str]) -> list[Expr]:
    if len(texts) > MAX_EXPRS:
        raise UsageError(f"at most {MAX_EXPRS} expressions (-e) at once, got {len(texts)}")
    out = []
    for i, t in enumerate(texts):
        try:
            out.append(parse(t))
        except ExprError as exc:
            where = f"expression {i + 1} " if len(texts) > 1 else ""
            raise ExprError(f"{where}'{t}': {exc.msg}", exc.col, exc.hint) from None
    total = sum(program_size(k)[0] for k in (e.kernel_where for e in out) if k is not None)
    if total > MAX_INSNS:
        raise UsageError(f"the conditions together are too long for the kernel ({total} instructions, "
                         f"at most {MAX_INSNS})")
    return out


# -- the kernel's program ---------------------------------------------------------------

# enum agg_insn_op (bpf/agg.h)
I_CMP, I_AND, I_OR, I_NOT = 0, 1, 2, 3
CMP_CODES = {"==": 0, "!=": 1, "<": 2, "<=": 3, ">": 4, ">=": 5}

Resolver = Callable[[str, Literal], int]


@dataclass(frozen=True)
class Insn:
    op: int
    field: str = ""
    cmp: str = "=="
    imm: int = 0


def compile_cond(c: Cond, resolve: Resolver) -> list[Insn]:
    """Postfix program for the kernel. resolve(field, literal) turns strings into numbers
    (disk name -> dev_t, op name -> code, ...); comm compares its 16 bytes as two words."""
    if isinstance(c, Cmp):
        if c.field == "comm":
            name = str(c.lit.value).encode()[:15].ljust(16, b"\0")
            lo, hi = int.from_bytes(name[:8], "little"), int.from_bytes(name[8:], "little")
            prog = [Insn(I_CMP, "comm0", "==", lo), Insn(I_CMP, "comm1", "==", hi), Insn(I_AND)]
            return [*prog, Insn(I_NOT)] if c.op == "!=" else prog
        imm = resolve(c.field, c.lit) if c.lit.kind == "str" else int(c.lit.value)
        return [Insn(I_CMP, c.field, c.op, imm)]
    if isinstance(c, Not):
        return [*compile_cond(c.arg, resolve), Insn(I_NOT)]
    out = compile_cond(c.args[0], resolve)
    for a in c.args[1:]:
        out += [*compile_cond(a, resolve), Insn(I_AND if c.op == "and" else I_OR)]
    return out


def run_program(prog: list[Insn], rec: dict[str, int | None]) -> bool:
    """The kernel's evaluation, in Python (for tests): a comparison with a missing value is false."""
    stack: list[bool] = []
    for ins in prog:
        if ins.op == I_CMP:
            v = rec.get(ins.field)
            stack.append(v is not None and compare(v, ins.cmp, ins.imm))
        elif ins.op == I_NOT:
            stack.append(not stack.pop())
        else:
            b, a = stack.pop(), stack.pop()
            stack.append((a and b) if ins.op == I_AND else (a or b))
    return stack[-1] if stack else True


def compare(a: int, op: str, b: int) -> bool:
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


__all__ = ["FUNCS", "KEYS", "TIME_VALUES", "VALUES", "WAIT_FIELDS", "WAIT_VALUES", "BoolOp", "Cmp", "Cond", "Expr",
           "ExprError", "Insn", "Literal", "Not", "compile_cond", "decide", "parse", "parse_all", "run_program",
           "time_floor"]
