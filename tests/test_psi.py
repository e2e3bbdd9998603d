"""base/psi.py: the kernel's pressure files as they read, and an interval's share of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ioscope.base import psi

TEXT = ("some avg10=5.80 avg60=6.70 avg300=3.13 total=691182224\n"
        "full avg10=0.15 avg60=0.07 avg300=0.28 total=181745767\n")


def test_a_pressure_file_as_the_kernel_writes_it() -> None:
    p = psi.parse(TEXT)
    assert p == psi.Pressure(psi.Line(5.80, 6.70, 3.13, 691182224), psi.Line(0.15, 0.07, 0.28, 181745767))


def test_some_alone_and_damaged_text() -> None:
    p = psi.parse(TEXT.splitlines()[0])
    assert p is not None and p.full is None and p.some.total_us == 691182224
    assert psi.parse("") is None
    assert psi.parse("some avg10=x avg60=1 avg300=1 total=1") is None
    assert psi.parse("some avg10=1 avg60=1 total=1") is None   # avg300 missing


def test_read_missing_and_cgroup_paths(tmp_path: Path) -> None:
    assert psi.read(tmp_path / "nope") is None
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "io.pressure").write_text(TEXT)
    (tmp_path / "io.pressure").write_text(TEXT.replace("691182224", "1"))
    got = psi.cgroup_io(tmp_path, "/a/b")
    assert got is not None and got.some.total_us == 691182224
    root = psi.cgroup_io(tmp_path, "/")
    assert root is not None and root.some.total_us == 1
    assert psi.host_io(str(tmp_path)) is None


def test_an_intervals_share() -> None:
    a = psi.parse(TEXT)
    b = psi.parse(TEXT.replace("691182224", str(691182224 + 250_000)).replace("181745767", str(181745767 + 50_000)))
    sh = psi.share(a, b, 0.5)
    assert sh is not None and sh.end == b
    assert (sh.some_pct, sh.full_pct, sh.some_s, sh.full_s) == (50.0, 10.0, 0.25, 0.05)
    # no read at the start (a cgroup seen for the first time), or a total that went back: the end alone
    for first in (None, b):
        sh = psi.share(first, a, 0.5)
        assert sh is not None and (sh.some_pct, sh.some_s, sh.end) == (None, None, a)
    assert psi.share(a, None, 0.5) is None


@pytest.mark.parametrize("text, want", [
    ("some > 40%", ("some", 40.0, 2.0, None, "some > 40% over 2s")),
    ("full > 10% over 4s", ("full", 10.0, 4.0, None, "full > 10% over 4s")),
    ("some > 5% over 500ms", ("some", 5.0, 0.5, None, "some > 5% over 0.5s")),
    ('some > 50% where cgroup == "/system.slice/db.service"',
     ("some", 50.0, 2.0, "/system.slice/db.service", "some > 50% over 2s in cgroup /system.slice/db.service")),
    ("full>20% over 2s where cgroup==/svc/", ("full", 20.0, 2.0, "/svc", "full > 20% over 2s in cgroup /svc")),
    ('some > 1% where cgroup == "/"', ("some", 1.0, 2.0, "/", "some > 1% over 2s in cgroup /")),
])
def test_a_pressure_condition_of_the_host_or_a_cgroup(text: str, want: tuple[object, ...]) -> None:
    s = psi.parse_trigger(text)
    assert (s.kind, s.pct, s.window_s, s.cgroup, s.describe()) == want


@pytest.mark.parametrize("text, words", [
    ("some > 40% where cgroup == svc", "a cgroup is its path in the v2 hierarchy, from its root"),
    ('some > 40% where cgroup == "/a/../b"', "a cgroup is its path in the v2 hierarchy"),
    ("some > 40% where comm == x", "is not a pressure condition"),
    ("some > 40% where cgroup ==", "is not a pressure condition"),
])
def test_a_bad_cgroup_in_a_pressure_condition(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        psi.parse_trigger(text)


def test_a_triggers_pressure_file(tmp_path: Path) -> None:
    """The host's file, a cgroup's io.pressure under the v2 mount, and one line when either is missing."""
    (tmp_path / "system.slice" / "db.service").mkdir(parents=True)
    assert psi.trigger_path(psi.parse_trigger("some > 1%"), None) == psi.HOST_IO
    cg = psi.parse_trigger('some > 1% where cgroup == "/system.slice/db.service"')
    assert psi.trigger_path(cg, tmp_path) == str(tmp_path / "system.slice" / "db.service" / "io.pressure")
    assert psi.trigger_path(psi.parse_trigger('some > 1% where cgroup == "/"'), tmp_path) == str(
        tmp_path / "io.pressure")
    with pytest.raises(ValueError, match="no cgroup v2 hierarchy is mounted"):
        psi.trigger_path(cg, None)
    with pytest.raises(ValueError, match=r"cgroup /gone does not exist in the v2 hierarchy at"):
        psi.trigger_path(psi.parse_trigger('some > 1% where cgroup == "/gone"'), tmp_path)
