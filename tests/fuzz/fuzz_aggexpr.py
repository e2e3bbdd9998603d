"""Fuzz target aggexpr: agg's expression language (agg -e, the flight recorder's triggers, the exporter's
queries) through its parser, a condition's parser and the compiler and evaluator of the kernel's program;
anything but expressions or one usage error (ExprError and its kin) is the finding. The input's lines are
the expressions (-e), its first line a trigger condition too."""

import sys

import atheris

with atheris.instrument_imports(include=["ioscope"]):
    from ioscope.base.errors import UsageError
    from ioscope.engines.aggregate import expr


def _one_line(exc: Exception) -> None:
    if "\n" in str(exc):
        raise AssertionError(f"a multi-line error: {exc!r}") from None


def one(data: bytes) -> None:
    lines = data.decode("utf-8", errors="replace").split("\n")[:4]
    try:
        for e in expr.parse_all(lines):
            e.fields()
            kw = e.kernel_where
            if kw is not None:
                prog = expr.compile_cond(kw, lambda field, lit: 0)
                expr.run_program(prog, {f: 1 for f in expr.cond_fields(kw)})
    except UsageError as exc:
        _one_line(exc)
    try:
        expr.parse_condition(lines[0])
    except UsageError as exc:
        _one_line(exc)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
