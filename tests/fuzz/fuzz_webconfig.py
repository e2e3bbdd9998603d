"""Fuzz target webconfig: the exporter's --web.config.file (YAML: TLS, basic auth, headers, rate limit)
through its parser; anything but a config or one WebConfigError is the finding."""

import sys

import atheris

with atheris.instrument_imports(include=["ioscope"]):
    from ioscope.tools.exporter import webconfig

PATH = "/nonexistent-ioscope-fuzz/web.yml"   # relative TLS files resolve under a directory that is not there


def one(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        cfg = webconfig.parse(PATH, text)
    except webconfig.WebConfigError as e:
        if "\n" in str(e):
            raise AssertionError(f"a multi-line error: {e!r}") from None
        return
    if cfg.rate is not None:
        webconfig.RateLimit().allow(cfg.rate)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
