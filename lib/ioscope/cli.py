"""The ioscope command: one entry point, a subcommand per tool.

Every failure the user can act on ends as one line on stderr and a non-zero
exit code; a traceback only appears with IOSCOPE_DEBUG=1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import NoReturn

from ioscope import __version__, registry
from ioscope.base import kubenames
from ioscope.base.errors import EXIT_ERROR, EXIT_USAGE, IoscopeError

EXAMPLES = """\
examples:
  ioscope demo                 # make a loop device, run a workload, show its latency
  ioscope lat -D -O 1 5        # latency histograms per disk and operation, every second
  ioscope <tool> --help        # options and examples of one tool
"""


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


class Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line: 'ioscope lat: error: ...; see ioscope lat --help'."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}; see {self.prog} --help\n")
        sys.exit(EXIT_USAGE)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse's, but words no parser took are reported by the tool's parser ('ioscope snoop: error:
        unrecognized arguments: 1 1; see ioscope snoop --help'), not by the top-level one."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            subs = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
            tool = subs.choices.get(getattr(ns, "tool", None) or "") if subs is not None else None
            msg = f"unrecognized arguments: {' '.join(extras)}"
            if tool is not None and all(_is_number(w) for w in extras) and "interval" not in {
                    a.dest for a in tool._actions}:
                stop = " (-w SECONDS stops it)" if "-w" in tool._option_string_actions else ""
                msg += f"; {getattr(ns, 'tool', '')} takes no interval or count{stop}"
            (tool if isinstance(tool, Parser) else self).error(msg)
        return ns

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        # a tool's parser is called through this too (by the subparsers action): -n and COUNT folded there
        ns, rest = super().parse_known_args(args, namespace)
        from ioscope.tools.common import finish_args
        finish_args(self, ns)
        return ns, rest


# Subcommand modules, in --help order, from the registry: tool name -> its command module (add_parser,
# run). A module that is not part of this build is left out of the command (checked by find_spec, so a
# real import error in a module that exists is never hidden). `ioscope TOOL ...` imports only TOOL's
# module, `ioscope --version` none.
TOOLS = {t.name: t.module for t in registry.TOOLS}


def _tool_modules(only: Sequence[str] | None = None) -> list[ModuleType]:
    mods = []
    for tool, name in TOOLS.items():
        if only is not None and tool not in only:
            continue
        try:
            present = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # its package does not exist
            present = False
        if present:
            mods.append(importlib.import_module(name))
    return mods


def _wanted_tools(argv: Sequence[str]) -> list[str] | None:
    """The tools whose modules the command line needs: [] for --version alone, [TOOL] for
    `ioscope [--btf FILE] TOOL ...`, None (all of them) for anything else (help, a typo)."""
    args = list(argv)
    while args[:1] == ["--btf"]:
        args = args[2:]
    if args and args[0] in TOOLS:
        return [args[0]]
    if args == ["--version"]:
        return []
    return None


def build_parser(only: Sequence[str] | None = None) -> Parser:
    p = Parser(prog="ioscope", description="eBPF block I/O tracing toolkit.", epilog=EXAMPLES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"ioscope {__version__}")
    p.add_argument("--btf", metavar="FILE", help="kernel BTF to use instead of /sys/kernel/btf/vmlinux")
    sub = p.add_subparsers(title="tools", metavar="TOOL", parser_class=Parser)
    for mod in _tool_modules(only):
        mod.add_parser(sub)
    from ioscope.tools.common import finish_parser
    for tool in sub.choices.values():
        finish_parser(tool)
        tool.add_argument("--btf", metavar="FILE", default=argparse.SUPPRESS,
                          help="kernel BTF to use instead of /sys/kernel/btf/vmlinux")
    return p


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    # SIGINT, SIGTERM and SIGHUP end a tool like Ctrl-C does: finally blocks run, probes are detached.
    raise KeyboardInterrupt


def install_stop_signals() -> None:
    """Make SIGINT, SIGTERM and SIGHUP stop the tool, however it was started.

    A shell starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored, so `ioscope record ... & kill -INT $!` did nothing; some supervisors start
    programs with these signals blocked. Scripts written for blktrace and bpftrace stop them
    with kill -INT, so ioscope installs its own handlers and unblocks them. The one exception
    is SIGHUP ignored by nohup: that is the user asking to survive a hang-up.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        signal.signal(sig, _on_stop)


def _executable_tool() -> list[str]:
    """`ioscope-lat ARGS` is `ioscope lat ARGS`: the console scripts of every tool call main() (setup.py)."""
    name = os.path.basename(sys.argv[0])
    tool = name[len("ioscope-"):] if name.startswith("ioscope-") else ""
    return [tool] if tool in TOOLS else []


def main(argv: Sequence[str] | None = None) -> int:
    from_command_line = argv is None
    argv = [*_executable_tool(), *sys.argv[1:]] if argv is None else list(argv)
    if "record" in argv and any(a == "--ring" or a.startswith("--ring=") for a in argv):
        from ioscope.tools.record.flight_cmd import hold_early_usr1
        hold_early_usr1()   # the flight recorder: a save asked while it starts is kept, not fatal
    try:
        parser = build_parser(_wanted_tools(argv))
    except IoscopeError as exc:  # a broken install: say so in one line
        sys.stderr.write(f"ioscope: error: {exc}\n")
        return exc.exit_code
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    install_stop_signals()
    if from_command_line:
        # a stop that lands inside a finalizer is delivered again (base/live.py); not when main() runs inside
        # another program (the tests), whose own finalizers and signals are not the tool's
        from ioscope.base.live import redeliver_swallowed_stops

        redeliver_swallowed_stops()
    try:
        kubenames.check_env()   # IOSCOPE_HOST_ROOT, where every tool reads Kubernetes names: checked at start
        return int(args.func(args))
    except IoscopeError as exc:
        if os.environ.get("IOSCOPE_DEBUG"):
            raise
        sys.stderr.write(f"ioscope {args.tool}: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # output piped into head & co: not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        if os.environ.get("IOSCOPE_DEBUG"):
            raise
        sys.stderr.write(f"ioscope {args.tool}: error: {exc.strerror or exc}"
                         f"{' (' + exc.filename + ')' if getattr(exc, 'filename', None) else ''}\n")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
