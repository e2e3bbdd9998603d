"""base/psi.py: the kernel's pressure files as they read, and an interval's share of them."""

from __future__ import annotations

from pathlib import Path

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
