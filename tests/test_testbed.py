"""The test bed's own helpers (no root)."""

from __future__ import annotations

import pytest

from blk_tracer import buffer_size_setting


def test_buffer_size_setting_of_a_fresh_tracefs() -> None:
    # a tracefs never used reads back like this; the kernel refuses the string as written
    assert buffer_size_setting("7 (expanded: 1408)") == "1408"


def test_buffer_size_setting_of_a_used_tracefs() -> None:
    assert buffer_size_setting("131072") == "131072"
    assert buffer_size_setting("1408\n") == "1408"


def test_buffer_size_setting_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        buffer_size_setting("X")
