"""The test harness itself: a suite started with SIGHUP and SIGINT ignored (`nohup ./test.sh &`) starts the
programs under test with default signal dispositions, and stops whatever a test left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent

INNER = '''
import os, signal, subprocess, time

def test_children_get_default_signals():
    status = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True).stdout
    ignored = int(status.split()[1], 16)
    assert not ignored & (1 << (signal.SIGHUP - 1)) and not ignored & (1 << (signal.SIGINT - 1)), status

def test_leaves_a_background_job(tmp_path):
    # a shell that starts a job in the background and exits: the job outlives it (and this test)
    subprocess.run(["sh", "-c", f"sleep 300 & echo $! > {os.environ['IOSCOPE_HARNESS_PID']}"], check=True)

import pytest

@pytest.fixture
def slow_teardown():
    yield
    time.sleep(1.5)

def test_leaves_a_job_that_execs_its_program_later(slow_teardown):
    # the job is still the shell when the test ends and sleep 302 by the harness's check (a job that a loaded
    # host runs late): the same process all the same
    subprocess.run(["sh", "-c", f"(sleep 0.5; exec sleep 302) & echo $! > {os.environ['IOSCOPE_HARNESS_PID']}.3"],
                   check=True)

def test_fails_with_a_tool_running():
    p = subprocess.Popen(["sleep", "301"], start_new_session=True)
    with open(os.environ["IOSCOPE_HARNESS_PID"] + ".2", "w") as f:
        f.write(str(p.pid))
    assert False, "a failing test that started a process"
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_suite_started_with_signals_ignored(tmp_path: Path) -> None:
    """A nested run of this conftest, started as `nohup ... &` starts it (SIGHUP and SIGINT ignored)."""
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                                          "from harness import *  # noqa: F403\n")
    pidfile = tmp_path / "pid"

    def ignored() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
                       capture_output=True, text=True, cwd=tmp_path, preexec_fn=ignored, timeout=120,
                       env={**os.environ, "IOSCOPE_HARNESS_PID": str(pidfile)})
    assert "1 failed, 3 passed" in p.stdout, p.stdout + p.stderr
    for f in (pidfile, Path(str(pidfile) + ".2"), Path(str(pidfile) + ".3")):
        pid = int(f.read_text())
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), f"process {pid} started by the inner tests is still running"
    assert "processes tests left running (stopped after the test)" in p.stdout, p.stdout
    assert "sleep 300" in p.stdout and "sleep 301" in p.stdout and "sleep 302" in p.stdout, p.stdout


def test_a_fork_of_the_runner_dies_of_sigterm_and_the_runner_stops_on_it(tmp_path: Path) -> None:
    """The harness takes SIGTERM as Ctrl-C in the runner only (test.sh's stop). A fork of the runner that has
    not exec'd (pyroute2's network-namespace helper, which its owner ends with SIGTERM) dies of it, silently:
    with the runner's handler it once ran the session's end in the fork and the suite hung. The runner,
    sent SIGTERM, stops with its summary and status 2 (interrupted)."""
    pid = os.fork()
    if pid == 0:   # the fork: nothing but wait to be ended
        time.sleep(60)
        os._exit(0)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    # a runner of its own (started with the harness, as test.sh starts pytest), sent SIGTERM mid-test
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                                          "pytest_plugins = ['harness']\n")
    p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2 and "KeyboardInterrupt: SIGTERM" in out, out
