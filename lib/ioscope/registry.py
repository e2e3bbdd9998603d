"""The tool registry: every tool of ioscope, once.

The `ioscope` command (cli.py), the `ioscope-TOOL` executables (setup.py's console scripts), the checks of
the docs and every test that covers "every tool" are made from this table; adding a tool means a line here,
its package under tools/, its doc page and its tests (docs/hacking.md). This module imports nothing, so that
setup.py can read it before ioscope is built and `ioscope --version` stays instant.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    name: str                 # the subcommand: `ioscope NAME`, and the executable `ioscope-NAME`
    package: str              # ioscope.tools.PACKAGE; its cmd.py has add_parser(subparsers) and run(args)
    doc: str                  # its page, docs/DOC.md, with output really produced
    long_running: bool        # runs until stopped (Ctrl-C, SIGTERM, SIGHUP, -w, count): stops cleanly on each
    bpf: tuple[str, ...] = ()           # the BPF objects it loads (bpf/NAME.bpf.c)
    counting: tuple[str, ...] = ()      # takes [interval [count]]: its arguments for one JSON report of one
                                        # disk ({disk}) or interface
    scenarios: tuple[str, ...] = ()     # tests/acceptance/ files that play it as a user types it

    @property
    def module(self) -> str:
        return f"ioscope.tools.{self.package}.cmd"

    @property
    def executable(self) -> str:
        return f"ioscope-{self.name}"


_DISK_JSON = ("-j", "-d", "{disk}")

# in `ioscope --help` order
TOOLS: tuple[Tool, ...] = (
    Tool("lat", "lat", "lat", True, ("lat",), _DISK_JSON,
         ("test_acc_background_stop.py", "test_acc_lat_timing.py", "test_acc_stacked.py")),
    Tool("record", "record", "record", True, ("record", "agg"), (),
         ("test_acc_record_session.py", "test_acc_flight.py", "test_acc_killed_recording.py")),
    Tool("snoop", "snoop", "snoop", True, ("record",), (), ("test_acc_background_stop.py", "test_acc_exec_workers.py")),
    Tool("parse", "parse", "parse", False, (), (), ("test_acc_record_session.py", "test_acc_killed_recording.py",
                                                     "test_acc_foreign_traces.py")),
    Tool("report", "report", "report", False, (), (), ("test_acc_record_session.py", "test_acc_stacked.py",
                                                       "test_acc_pages.py")),
    Tool("btt", "btt", "btt", False, (), (), ("test_acc_btt.py",)),
    Tool("export", "export", "export", False, (), (), ("test_acc_record_session.py", "test_acc_parquet_sql.py")),
    Tool("sql", "sql", "sql", False, (), (), ("test_acc_parquet_sql.py",)),
    Tool("fleet", "fleet", "fleet", False, (), (), ("test_acc_collect.py", "test_acc_diff.py")),
    Tool("import", "importer", "import", False, (), (), ("test_acc_record_session.py", "test_acc_foreign_traces.py")),
    Tool("readsize", "readsize", "readsize", True, ("readsize",), _DISK_JSON,
         ("test_acc_background_stop.py", "test_acc_exec_workers.py")),
    Tool("readahead", "readahead", "readahead", True, ("readahead", "readahead_noloop"), _DISK_JSON,
         ("test_acc_background_stop.py",)),
    Tool("fair", "fair", "fair", True, ("readsize",), _DISK_JSON,
         ("test_acc_background_stop.py", "test_acc_exec_workers.py")),
    Tool("top", "top", "top", True, ("top",), _DISK_JSON, ("test_acc_background_stop.py", "test_acc_stacked.py",
                                                                  "test_acc_iowait.py", "test_acc_swapin.py")),
    Tool("fileslower", "fileslower", "fileslower", True, ("fileslower",), ("-j", "--hist", "-d", "{disk}"),
         ("test_acc_fileslower.py",)),
    Tool("agg", "agg", "agg", True, ("agg",), ("-j", "-d", "{disk}", "-e", "count() by disk"),
         ("test_acc_agg.py", "test_acc_background_stop.py", "test_acc_iowait.py")),
    Tool("exporter", "exporter", "exporter", True, ("lat", "agg"), (), ("test_acc_exporter.py",)),
    Tool("diff", "diff", "diff", False, (), (), ("test_acc_diff.py", "test_acc_pages.py")),
    Tool("collect", "collect", "collect", True, ("record",), (), ("test_acc_collect.py",)),
    Tool("nic", "nic", "nic", True, (), ("-j", "-i", "lo"), ("test_acc_nic.py",)),
    Tool("web", "web", "web", True, ("lat", "agg"), (), ("test_acc_web.py",)),
    Tool("demo", "demo", "demo", False, ("lat", "readsize", "readahead"), (), ("test_acc_readme.py",)),
)

BY_NAME = {t.name: t for t in TOOLS}

# Modules that mirror structs shared with the BPF programs as numpy dtypes: each has STRUCTS, {struct name:
# dtype}; tests/test_abi.py compares every one with the BTF of every compiled object that defines it.
ABI_MIRRORS = ("ioscope.kernel.abi", "ioscope.engines.aggregate.abi", "ioscope.engines.procio.abi",
               "ioscope.capture.events", "ioscope.tools.fileslower.abi")
