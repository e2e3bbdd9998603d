"""Loaded at start-up by a Python whose PYTHONPATH starts with this directory (tests/fuzz/build.py
sanitized_env): ioscope.capture._tracecore is the ASan+UBSan build named by IOSCOPE_SANITIZED_TRACECORE,
not the normal one in lib/ (that one stays as it is)."""

import os

_path = os.environ.get("IOSCOPE_SANITIZED_TRACECORE")
if _path:
    import importlib.machinery
    import importlib.util
    import sys

    import ioscope.capture

    _loader = importlib.machinery.ExtensionFileLoader("ioscope.capture._tracecore", _path)
    _spec = importlib.util.spec_from_file_location("ioscope.capture._tracecore", _path, loader=_loader)
    assert _spec is not None
    _mod = importlib.util.module_from_spec(_spec)
    _loader.exec_module(_mod)
    sys.modules["ioscope.capture._tracecore"] = _mod
    ioscope.capture._tracecore = _mod  # type: ignore[attr-defined]
    os.environ["IOSCOPE_SANITIZED_TRACECORE_LOADED"] = _path
