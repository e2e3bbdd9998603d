"""Writes the seed corpus of every fuzz target (tests/fuzz/corpus/TARGET/) from tests/traces and
tests/data/fuzz: small inputs (a few KB each) that reach every reader's main paths. Run it again after a
format change: python tests/fuzz/make_corpus.py (then commit what changed)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
TRACES = TESTS / "traces"
REGRESS = TESTS / "data" / "fuzz"
OUT = HERE / "corpus"
CAP = 6000   # bytes of a trace kept for a seed: whole records up to about this many


def records(data: bytes, limit: int = CAP) -> bytes:
    """The whole blktrace records of data up to about limit bytes."""
    order = "<" if data[:1] == b"\x07" else ">"
    off = 0
    while off + 48 <= len(data) and off < limit:
        off += 48 + int.from_bytes(data[off + 46:off + 48], "little" if order == "<" else "big")
    return data[:min(off, len(data))]


def blktrace_sets() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for stem in ("splits", "bigend", "partition", "parttraced", "dm-0", "messages", "batched", "missing"):
        files = sorted(TRACES.glob(f"{stem}.blktrace.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        out[stem] = [records(p.read_bytes(), CAP // 2) for p in files]
    out["cgroups"] = [records(p.read_bytes(), CAP // 2) for p in sorted((TRACES / "cgroup").glob("*.blktrace.*"))]
    return out


def dumps() -> dict[str, bytes]:
    return {p.name: records(p.read_bytes()) for p in sorted(TRACES.glob("*.dump"))}


def regressions() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(REGRESS.glob("*.blktrace.0"))}


def captures(tmp: Path) -> dict[str, bytes]:
    sys.path.insert(0, str(TESTS))
    from ioscope.capture import importer
    out = {}
    for name, src in (("partition", TRACES / "partition.blktrace.0"), ("dm", TRACES / "dm.dump")):
        dst = tmp / f"{name}.ioscope"
        importer.import_blktrace([str(src)], str(dst))
        out[name] = dst.read_bytes()
    import blk_scenarios as bs
    s = bs.Scenario()
    for i in range(6):
        s.io(1_000_000 + i * 100_000, 8 * i * 64, 4096 * (1 + i % 3), pid=100 + i % 2, write=bool(i % 2))
    s.comms = {100: "dd", 101: "fio"}
    bs.write_capture(str(tmp / "recorded.ioscope"), s)
    out["recorded"] = (tmp / "recorded.ioscope").read_bytes()
    return out


def bundle(tmp: Path, cap: bytes) -> bytes:
    from ioscope.capture.bundle import BundleWriter
    path = str(tmp / "b.ioscope")
    w = BundleWriter(path, True, 1_700_000_000)
    w.member("manifest.json", json.dumps({"version": 2, "members": ["manifest.json", "context.json",
                                                                    "capture.ioscope"]}).encode())
    w.member("context.json", json.dumps({"host": "fuzz", "kernel": "6.1.0"}).encode())
    w.begin_stream("capture.ioscope")
    w.stream_write(cap)
    w.end_stream()
    w.close()
    return Path(path).read_bytes()


HTTP = {
    "metrics": b"GET /metrics HTTP/1.1\r\nHost: localhost:9100\r\nAccept: text/plain;version=0.0.4\r\n\r\n",
    "openmetrics-gzip": b"GET /metrics HTTP/1.1\r\nHost: h\r\nAccept: application/openmetrics-text;version=1.0.0\r\n"
                        b"Accept-Encoding: gzip, deflate\r\n\r\n",
    "names": b"GET /metrics?name[]=ioscope_fuzz_requests&name[]=x HTTP/1.1\r\nHost: h\r\n\r\n",
    "head-landing": b"HEAD / HTTP/1.0\r\n\r\n",
    "pipelined": b"GET / HTTP/1.1\r\nHost: h\r\n\r\nGET /nope HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    "auth-post": b"POST /metrics HTTP/1.1\r\nHost: h\r\nAuthorization: Basic c2NyYXBlcjpzM2NyZXQ=\r\n"
                 b"Content-Length: 5\r\n\r\nhello",
    "chunked": b"GET /metrics HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
}

WEB = {
    "tls": "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\n"
           "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
           "  client_allowed_sans: [a.example]\n",
    "auth": "basic_auth_users:\n  prometheus: '$2y$10$X0JEgLBkkNVTbNr5.hDs4.0oVbS2jzWzB.D7Z6Zx3I8Jvc5eH7D9C'\n",
    "headers": "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n"
               "    Strict-Transport-Security: max-age=31536000\n",
    "rate": "rate_limit:\n  interval: 1m30s\n  burst: 10\n",
    "ciphers": "tls_server_config:\n  cert: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n"
               "    -----END CERTIFICATE-----\n  key: k\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"
               "  curve_preferences: [X25519]\n",
}

AGG = {
    "count": "count() by comm,disk",
    "where": "avg(q2d) by op where disk == \"sda\" and bytes >= 4k",
    "quantize": "quantize(d2c) by disk where comm == \"kworker*\" or not (op == \"read\")",
    "lquantize": "lquantize(bytes, 0, 1M, 64k) by cgroup\nsum(bytes) by pid where q2c > 500ms",
    "trigger": "d2c > 100ms where disk == \"nvme0n1\"",
}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    seeds: dict[str, dict[str, bytes]] = {t: {} for t in ("tracecore", "blktrace", "dump", "capture", "fileset",
                                                          "bundle", "http", "webconfig", "aggexpr")}
    for name, files in blktrace_sets().items():
        seeds["blktrace"][name] = b"CPU|".join(files)
        seeds["tracecore"][name] = bytes([0 if name != "bigend" else 1]) + files[0]
    for name, data in dumps().items():
        seeds["dump"][name] = data
        seeds["tracecore"][name] = bytes([2 if name != "bigend.dump" else 3]) + data
    for name, data in regressions().items():
        seeds["blktrace"][name] = data
        seeds["dump"][name] = data
        seeds["tracecore"][name] = b"\0" + data
    with tempfile.TemporaryDirectory() as t:
        caps = captures(Path(t))
        seeds["capture"].update(caps)
        seeds["bundle"]["partition"] = bundle(Path(t), caps["partition"])
        from ioscope.capture import importer
        sets = importer.read_sets(importer.expand_inputs([str(TRACES / "partition.blktrace.0")]))
        seeds["fileset"]["partition"] = json.dumps(sets.side).encode()
    seeds["http"] = HTTP
    seeds["webconfig"] = {k: v.encode() for k, v in WEB.items()}
    seeds["aggexpr"] = {k: v.encode() for k, v in AGG.items()}
    for target, files in seeds.items():
        d = OUT / target
        d.mkdir(parents=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
        print(f"{target}: {len(files)} seeds, {sum(len(x) for x in files.values())} bytes")


if __name__ == "__main__":
    os.environ.setdefault("IOSCOPE_NO_BTF", "1")
    main()
