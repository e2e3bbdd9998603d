"""Which live tests run inside every kernel of the matrix (scripts/kernels.py), and for which tool.

The guests run under software emulation (five to ten times slower than the host, and a Python
start-up takes seconds), so the matrix runs, for every tool, tests that load each of its program
variants (tp_btf and raw_tp) and check its numbers exactly against the workload and the kernel's
own counts, with no timing assumption (tests/kernels/test_matrix.py); the host runs everything.
conftest.py marks the selected tests `kernels` and records their tool as a junit
property, from which scripts/kernels.py prints the tool x kernel table.

Keys are test files relative to tests/; values map a tool to the test names it selects ("*": every
test of the file; a name selects all its parametrizations unless the id is given in brackets).
"""

from __future__ import annotations

SELECTION: dict[str, dict[str, list[str]]] = {
    # every BPF tool once per attach variant, exact counts, stopped by a signal (written for TCG)
    # (with a workload, each tool in tp_btf, which every Debian kernel offers, lat also with its own
    # probes; every program of every variant, raw_tp too, is loaded by test_every_program_loads; the
    # workload tests stop their tools with SIGINT, SIGTERM and SIGHUP; stopped from a script: lat and
    # readahead. Chosen so that four kernels, two guests at a time, fit in CI's hour with the host suite)
    "kernels/test_matrix.py": {
        "lat": ["test_lat[tp_btf-auto]", "test_lat[tp_btf-probes]", "test_completions_seen"],
        "top": ["test_top[tp_btf]"], "agg": ["test_agg[tp_btf]", "test_agg_file"],
        "fileslower": ["test_fileslower[tp_btf]"],
        "snoop": ["test_snoop[tp_btf]"], "record": ["test_record_report_parse_and_blkparse[tp_btf]"],
        "readsize": ["test_readsize[tp_btf]"], "fair": ["test_fair[tp_btf]"], "demo": ["test_demo_main_job"],
        "signals": ["test_stopped_from_a_script[lat]", "test_stopped_from_a_script[readahead]"],
        "programs": ["test_every_program_loads"], "flight": ["test_flight_recorder"],
        "throttle": ["test_agg_throttle"], "cgroups": ["test_throttle_held"]},
    "test_readahead.py": {"readahead": ["*"]},
    # the exporter: scraped, counted exactly, stopped by SIGTERM (its TLS, auth and SIGHUP scenario runs on the host)
    "acceptance/test_acc_exporter.py": {"exporter": ["test_exporter_background_scrape_and_term"]},
    "acceptance/test_acc_nic.py": {"nic": ["test_nic_stopped_by_a_script[INT]"]},
    "test_map_errors.py": {"map-errors": ["test_a_full_map_is_counted_by_its_error"]},
    # SWAPIN: the swap-in functions found on the stack where each kernel has them (shmem_swapin_page on 5.10)
    # (agg's swapin: the same stack read in agg's object, with its expressions' program beside)
    "test_swapin_live.py": {"swapin": ["test_a_process_reading_back_its_swapped_out_memory_shows_swapin[private]",
                                       "test_a_process_reading_back_its_swapped_out_memory_shows_swapin[shared]"],
                            "agg-swapin": ["test_agg_swapin_is_tops_swapin"]},
}


# (test_cgroups runs in the v2 boot only, with 5.10's ancestor_ids[] and the others' ancestors[] there; its
# v1 blkio case runs on the host: the same BPF path, a minute or more less per guest)
# The cgroup v2 boot of every kernel (scripts/kernels.py: a second boot with IOSCOPE_GUEST_CGROUP=v2,
# guest.sh mounting the unified hierarchy with the io controller instead of v1 blkio; the switch needs a
# fresh boot: a v1 blkio cgroup once made keeps io off v2, docs/design/containers.md 3.2). Marked kernels_v2.
CGROUP_V2: dict[str, dict[str, list[str]]] = {
    "kernels/test_matrix.py": {"cgroups-v2": ["test_cgroups", "test_throttle_held"]},
    # the exporter's throttle series on io.max, where fentry measures every held bio's wait
    "test_exporter_live.py": {"exporter-throttle": ["test_throttled_bios_and_the_limit_are_exported"]},
}


def tool_of(relpath: str, name: str, selection: dict[str, dict[str, list[str]]] | None = None) -> str | None:
    """The tool a selected test checks (in SELECTION, or the selection given), None when the matrix does
    not run it."""
    tools = (SELECTION if selection is None else selection).get(relpath)
    if not tools:
        return None
    base = name.split("[", 1)[0]
    for tool, names in tools.items():
        for want in names:
            if want == "*" or want == name or ("[" not in want and want == base):
                return tool
    return None
