"""Every live tool's collector is one interface (base/collector.py: sample(tick) -> its sample, close(),
unavailable), found by scanning the package, so that a new collector cannot be written another way."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import get_type_hints

import pytest

import ioscope
from ioscope.base.collector import Tick

# a collector of another kind, said why
OTHER_KINDS = {
    # streams events (rings -> event arrays, polled), it does not sample intervals
    "ioscope.engines.recording.recorder.Recorder",
}


def _collectors() -> list[type]:
    found = []
    for m in pkgutil.walk_packages(ioscope.__path__, "ioscope."):
        if not (m.name.endswith(".collector") or m.name.endswith(".recorder")):
            continue
        mod = importlib.import_module(m.name)
        for name, cls in vars(mod).items():
            if inspect.isclass(cls) and cls.__module__ == mod.__name__ and \
                    (name.endswith("Collector") or name == "Recorder"):
                found.append(cls)
    return found


def test_collectors_are_found() -> None:
    names = {c.__name__ for c in _collectors()}
    assert {"LatCollector", "AggCollector", "TopCollector", "ReadsizeCollector", "FairCollector",
            "ReadaheadCollector", "NicCollector"} <= names, names


@pytest.mark.parametrize("cls", _collectors(), ids=lambda c: c.__name__)
def test_one_interface(cls: type) -> None:
    if f"{cls.__module__}.{cls.__name__}" in OTHER_KINDS:
        return
    hints = get_type_hints(cls.sample)
    params = [p for p in inspect.signature(cls.sample).parameters if p != "self"]
    assert params == ["tick"], (cls.__name__, params)
    assert hints["tick"] in (Tick, Tick | None), cls.__name__
    assert callable(getattr(cls, "close", None)), cls.__name__
    assert isinstance(inspect.getattr_static(cls, "unavailable", None), property), cls.__name__
