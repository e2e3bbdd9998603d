"""The web configuration file of Prometheus' exporter toolkit (`--web.config.file`), so that one file
serves every exporter of a host: TLS (with client certificates), basic authentication with bcrypt
hashes, extra response headers and a rate limit.

The format is the toolkit's (docs/web-configuration.md there): YAML, unknown keys refused,

    tls_server_config:     cert_file, key_file (or cert, key inline), client_auth_type,
                           client_ca_file (or client_ca inline), client_allowed_sans, min_version,
                           max_version, cipher_suites, prefer_server_cipher_suites, curve_preferences
    http_server_config:    http2, headers
    basic_auth_users:      {user: bcrypt hash}
    rate_limit:            interval (a Go duration), burst

with relative file names taken from the file's own directory. As in the toolkit, the file is read
again when it changes (here: when its or a named file's size, time or inode changes, looked at on
every connection and request), so certificates are renewed and users changed without a restart; a
file that became invalid refuses the TLS handshake and answers HTTP requests 500 until it is fixed.
Where Python's ssl module cannot do what Go's crypto/tls does, the value is refused at load with a
one-line error (client_auth_type RequestClientCert and RequireAnyClientCert: a certificate that is
not verified; see docs/exporter.md) or documented (curve_preferences: the first curve only; http2:
HTTP/1.1 is served)."""

from __future__ import annotations

import base64
import os
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ioscope.base.errors import IoscopeError

HINT = "docs/exporter.md, 'Web configuration file' (the exporter toolkit's format)"

TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type", "client_ca_file",
            "cipher_suites", "curve_preferences", "min_version", "max_version", "prefer_server_cipher_suites",
            "client_allowed_sans"}
TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
            "TLS13": ssl.TLSVersion.TLSv1_3}
# Go's crypto/tls names of the suites it offers (tls.CipherSuites()) and their IANA numbers; OpenSSL knows
# them by other names, found from the numbers. TLS 1.3 suites are accepted and, as in Go, not configurable.
CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": 0x002F, "TLS_RSA_WITH_AES_256_CBC_SHA": 0x0035,
    "TLS_RSA_WITH_AES_128_GCM_SHA256": 0x009C, "TLS_RSA_WITH_AES_256_GCM_SHA384": 0x009D,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": 0xC009, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": 0xC00A,
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": 0xC013, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": 0xC014,
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": 0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": 0xC02C,
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": 0xC02F, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": 0xC030,
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA8, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": 0xCCA9,
    "TLS_AES_128_GCM_SHA256": 0x1301, "TLS_AES_256_GCM_SHA384": 0x1302, "TLS_CHACHA20_POLY1305_SHA256": 0x1303,
}
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}
# the headers the toolkit lets a file add, with the values it allows (None: any)
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None, "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": None, "Content-Security-Policy": None,
}
CLIENT_AUTH = {"": ssl.CERT_NONE, "NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNVERIFIED = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
BCRYPT = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class WebConfigError(IoscopeError):
    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"--web.config.file {path}: {what}", HINT)


def go_duration(text: str) -> float:
    """A Go duration ('1s', '250ms', '1m30s', '0') in seconds."""
    t = text.strip()
    if t in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(t) or pos == 0:
        raise ValueError(f"{text!r} is not a duration (such as 1s, 250ms, 1m30s)")
    return total


@dataclass
class WebConfig:
    """One reading of the file."""

    tls: ssl.SSLContext | None = None
    allowed_sans: tuple[str, ...] | None = None
    users: dict[str, str] = field(default_factory=dict)   # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)
    rate: tuple[float, int] | None = None                 # (interval s, burst)
    files: tuple[str, ...] = ()                           # the files it names (looked at for changes)


def _mapping(path: str, where: str, v: Any, allowed: set[str] | None) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WebConfigError(path, f"{where} must be a mapping")
    if allowed is not None:
        unknown = sorted(set(map(str, v)) - allowed)
        if unknown:
            raise WebConfigError(path, f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(allowed))})")
    return {str(k): x for k, x in v.items()}


def _str(path: str, where: str, v: Any) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise WebConfigError(path, f"{where} must be a string")
    return v


def _strings(path: str, where: str, v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise WebConfigError(path, f"{where} must be a list of strings")
    return list(v)


def _memfd(name: str, data: str) -> str:
    """An inline PEM as a file name ssl can load, kept in memory (never written to a disk)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data.encode())
    return f"/proc/self/fd/{fd}"


def _openssl_names(path: str, names: list[str]) -> str:
    every = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    every.set_ciphers("ALL:@SECLEVEL=0")
    by_id = {c["id"] & 0xFFFF: c["name"] for c in every.get_ciphers()}
    out = []
    for n in names:
        if n not in CIPHERS:
            raise WebConfigError(path, f"unknown cipher {n!r} (Go's crypto/tls names: {', '.join(CIPHERS)})")
        if CIPHERS[n] >= 0x1301 and CIPHERS[n] <= 0x1303:
            continue  # TLS 1.3: not configurable, as in Go
        if CIPHERS[n] not in by_id:
            raise WebConfigError(path, f"cipher {n!r} is not available in this host's OpenSSL")
        out.append(by_id[CIPHERS[n]])
    return ":".join(out)


TLSResult = tuple[ssl.SSLContext | None, tuple[str, ...] | None]


def _tls(path: str, base: Path, t: dict[str, Any], files: list[str]) -> TLSResult:
    def name(key: str) -> str:
        v = _str(path, f"tls_server_config.{key}", t.get(key))
        if v and not os.path.isabs(v):
            v = str(base / v)
        if v:
            files.append(v)
        return v

    cert_file, key_file, ca_file = name("cert_file"), name("key_file"), name("client_ca_file")
    cert, key, ca = (_str(path, f"tls_server_config.{k}", t.get(k)) for k in ("cert", "key", "client_ca"))
    auth = _str(path, "tls_server_config.client_auth_type", t.get("client_auth_type"))
    if not any((cert_file, key_file, ca_file, cert, key, ca, auth)):
        return None, None
    if not (cert_file or cert):
        raise WebConfigError(path, "tls_server_config needs cert_file (or cert)")
    if not (key_file or key):
        raise WebConfigError(path, "tls_server_config needs key_file (or key)")
    if (cert_file and cert) or (key_file and key) or (ca_file and ca):
        raise WebConfigError(path, "tls_server_config: give a file or the PEM inline, not both")
    if auth in UNVERIFIED:
        raise WebConfigError(path, f"client_auth_type {auth} accepts certificates without verifying them, which "
                                   "ioscope does not do: use RequireAndVerifyClientCert with client_ca_file "
                                   "(or VerifyClientCertIfGiven)")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(path, f"invalid client_auth_type {auth!r} (NoClientCert, VerifyClientCertIfGiven, "
                                   "RequireAndVerifyClientCert)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = VERSIONS[str(t.get("min_version") or "TLS12")]
        ctx.maximum_version = VERSIONS[str(t.get("max_version") or "TLS13")]
    except KeyError as e:
        raise WebConfigError(path, f"unknown TLS version {e.args[0]!r} (TLS10, TLS11, TLS12, TLS13)") from None
    if ctx.minimum_version > ctx.maximum_version:
        raise WebConfigError(path, "min_version is above max_version")
    try:
        ctx.load_cert_chain(cert_file or _memfd("cert", cert), key_file or _memfd("key", key))
    except (OSError, ssl.SSLError) as e:
        raise WebConfigError(path, f"cannot load the certificate and key: {getattr(e, 'strerror', None) or e}") \
            from None
    ctx.verify_mode = CLIENT_AUTH[auth]
    if ca_file or ca:
        if ctx.verify_mode == ssl.CERT_NONE:
            raise WebConfigError(path, "client CAs are configured without a client_auth_type")
        try:
            ctx.load_verify_locations(cafile=ca_file or None, cadata=ca or None)
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(path, f"cannot load the client CA: {getattr(e, 'strerror', None) or e}") from None
    elif ctx.verify_mode != ssl.CERT_NONE:
        raise WebConfigError(path, f"client_auth_type {auth} needs client_ca_file (or client_ca)")
    suites = _strings(path, "tls_server_config.cipher_suites", t.get("cipher_suites"))
    if suites:
        names = _openssl_names(path, suites)
        if names:
            ctx.set_ciphers(names)
    if t.get("prefer_server_cipher_suites", True):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = _strings(path, "tls_server_config.curve_preferences", t.get("curve_preferences"))
    for c in curves:
        if c not in CURVES:
            raise WebConfigError(path, f"unknown curve {c!r} ({', '.join(CURVES)})")
    if curves:
        ctx.set_ecdh_curve(CURVES[curves[0]])  # Python's ssl sets one curve: the first preferred
    ctx.set_alpn_protocols(["http/1.1"])
    sans = t.get("client_allowed_sans")
    return ctx, (tuple(_strings(path, "tls_server_config.client_allowed_sans", sans)) if sans is not None else None)


def parse(path: str, text: str) -> WebConfig:
    import yaml

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise WebConfigError(path, f"not YAML: {str(e).splitlines()[0]}") from None
    top = _mapping(path, "the file", raw, TOP_KEYS)
    files: list[str] = []
    base = Path(path).resolve().parent
    tls, sans = _tls(path, base, _mapping(path, "tls_server_config", top.get("tls_server_config"), TLS_KEYS), files)
    http = _mapping(path, "http_server_config", top.get("http_server_config"), {"http2", "headers"})
    headers = {str(k): str(v) for k, v in _mapping(path, "http_server_config.headers", http.get("headers"),
                                                   set(HEADERS)).items()}
    for k, v in headers.items():
        allowed = HEADERS[k]
        if allowed is not None and v not in allowed:
            raise WebConfigError(path, f"invalid value {v!r} for {k} (one of: {', '.join(allowed)})")
    users = {str(u): str(h) for u, h in _mapping(path, "basic_auth_users", top.get("basic_auth_users"), None).items()}
    for u, h in users.items():
        if not BCRYPT.match(h):
            raise WebConfigError(path, f"the password of {u!r} is not a bcrypt hash "
                                       "(make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')")
    rl = _mapping(path, "rate_limit", top.get("rate_limit"), {"interval", "burst"})
    rate = None
    if rl:
        try:
            interval = go_duration(str(rl.get("interval", "0")))
        except ValueError as e:
            raise WebConfigError(path, f"rate_limit.interval: {e}") from None
        burst = rl.get("burst", 0)
        if not isinstance(burst, int) or burst < 0:
            raise WebConfigError(path, "rate_limit.burst must be an integer >= 0")
        rate = (interval, burst) if interval > 0 else None
    return WebConfig(tls, sans, users, headers, rate, (path, *files))


def load(path: str) -> WebConfig:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise WebConfigError(path, e.strerror or str(e)) from None
    return parse(path, text)


def _stamp(files: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


class WebConfigFile:
    """The file as the server sees it: read again whenever it or a file it names changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.config = load(path)  # at the start: an invalid file is a one-line error, the exporter does not start
        self._stamp = _stamp(self.config.files)
        self.error: WebConfigError | None = None

    def current(self) -> WebConfig:
        """The configuration now; raises WebConfigError while the file is invalid."""
        stamp = _stamp(self.config.files)
        if stamp != self._stamp:
            try:
                new = load(self.path)
            except WebConfigError as e:
                self.error = e
                self._stamp = stamp  # read again at its next change
                raise
            self.config, self.error = new, None
            self._stamp = _stamp(new.files)
        elif self.error is not None:
            raise self.error
        return self.config


def sans_allowed(peercert: Mapping[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """A client certificate with a Subject Alternative Name in the list (client_allowed_sans)."""
    if not peercert:
        return False
    values = [str(v) for _kind, v in peercert.get("subjectAltName", ())]
    return any(v in allowed for v in values)


class BasicAuth:
    """basic_auth_users: checks a request's Authorization header. bcrypt is slow on purpose, so each
    (user, hash, password) checked is remembered (a bounded cache, as the toolkit keeps), an unknown
    user is checked against a hash of its own (no timing says which users exist), and checks run one
    at a time (the caller runs check() in a thread of its own: never on the event loop)."""

    CACHE = 100

    def __init__(self) -> None:
        import bcrypt
        self._bcrypt = bcrypt
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, str], bool] = {}
        self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(10)).decode()

    @staticmethod
    def credentials(header: str | None) -> tuple[str, str] | None:
        if not header or not header[:6].lower() == "basic ":
            return None
        try:
            user, sep, pw = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return (user, pw) if sep else None

    def cached(self, users: Mapping[str, str], creds: tuple[str, str] | None) -> bool | None:
        """True or False when known without bcrypt; None when check() must run."""
        if not users:
            return True
        if creds is None:
            return False
        user, pw = creds
        return self._cache.get((user, users.get(user, self._dummy), pw))

    def check(self, users: Mapping[str, str], creds: tuple[str, str] | None) -> bool:
        known = self.cached(users, creds)
        if known is not None:
            return known
        assert creds is not None
        user, pw = creds
        h = users.get(user, self._dummy)
        with self._lock:
            try:
                ok = self._bcrypt.checkpw(pw.encode(), h.encode()) and user in users
            except ValueError:
                ok = False
            if len(self._cache) >= self.CACHE:
                for k in random.sample(list(self._cache), max(1, len(self._cache) // 10)):
                    del self._cache[k]
            self._cache[(user, h, pw)] = ok
        return ok


class RateLimit:
    """rate_limit: a token bucket, one token every interval, at most burst (at least one) in hand."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tokens = 0.0
        self._at = clock()
        self._rate: tuple[float, int] | None = None

    def allow(self, rate: tuple[float, int] | None) -> bool:
        if rate is None:
            return True
        now = self.clock()
        if rate != self._rate:
            self._rate, self._tokens = rate, float(max(rate[1], 1))
        interval, burst = rate
        self._tokens = min(float(max(burst, 1)), self._tokens + (now - self._at) / interval)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


__all__ = ["BasicAuth", "RateLimit", "WebConfig", "WebConfigError", "WebConfigFile", "go_duration", "load", "parse",
           "sans_allowed"]
