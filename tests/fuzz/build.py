"""Builds for the sanitizers and the fuzzers, kept apart from the normal build in lib/.

    python tests/fuzz/build.py ext          # the ASan+UBSan copy of ioscope.capture._tracecore: its path
    python tests/fuzz/build.py fuzzer NAME  # the libFuzzer binary of tests/fuzz/NAME.c: its path
    python tests/fuzz/build.py env          # the environment a sanitized Python run needs (shell lines)

Each build goes to .cache/ in the tree (git ignores it) under a hash of the C sources, the flags and the
compiler, so that tests/test_sanitized.py and tests/test_fuzz.py build once per change of the sources. The
Python side loads the sanitized copy through tests/fuzz/site/sitecustomize.py (IOSCOPE_SANITIZED_TRACECORE),
with the ASan runtime preloaded (a CPython that is not itself built with ASan needs it first in line).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACECORE = ROOT / "lib" / "ioscope" / "capture" / "tracecore"
FUZZ = ROOT / "tests" / "fuzz"
CACHE = ROOT / ".cache"
CC = os.environ.get("IOSCOPE_FUZZ_CC", "clang")
SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g", "-O1"]
# what a sanitized run needs: CPython's own allocations are not freed at exit (leaks: off); any UBSan report
# stops the run (halt_on_error) with its stack
ASAN_OPTIONS = "detect_leaks=0:abort_on_error=0:allocator_may_return_null=1:handle_segv=1"
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1"


class BuildError(Exception):
    pass


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    p = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True, timeout=600, cwd=cwd)
    if p.returncode:
        raise BuildError(f"{' '.join(cmd[:3])} ...: exit {p.returncode}\n{p.stderr[-4000:]}")


def _key(*extra: str) -> str:
    h = hashlib.sha256()
    for p in sorted(TRACECORE.glob("*.[ch]")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    try:
        ver = subprocess.run([CC, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError as exc:
        raise BuildError(f"{CC}: {exc}") from None
    for x in (ver, sys.version, *SAN, *extra):
        h.update(x.encode() + b"\0")
    return h.hexdigest()[:16]


def asan_runtime() -> str:
    """The dynamic ASan runtime of the compiler (Debian: libclang-rt-14-dev)."""
    p = subprocess.run([CC, "-print-file-name=libclang_rt.asan-x86_64.so"], capture_output=True, text=True,
                       timeout=30).stdout.strip()
    if not os.path.isabs(p) or not os.path.exists(p):
        raise BuildError(f"{CC} has no ASan runtime (libclang_rt.asan-x86_64.so): install libclang-rt-14-dev")
    return p


def asan_with_fuzzer() -> Path:
    """ASan's runtime and libFuzzer's (no main) in one preloadable object, for atheris: with ASan's runtime
    alone preloaded, its no-op coverage hooks take the place of libFuzzer's and atheris sees no coverage
    (atheris 3.0 on PyPI ships no such object; its docs build it this way: ASan's archive without its
    .preinit_array object, which a shared object cannot have)."""
    lib = Path(asan_runtime()).parent
    out = CACHE / "sanitized" / _key("asan_with_fuzzer") / "asan_with_fuzzer.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    objs = out.parent / "asan-objects"
    objs.mkdir(exist_ok=True)
    _run(["llvm-ar", "x", str(lib / "libclang_rt.asan-x86_64.a")], cwd=objs)   # llvm-ar: Debian's llvm
    (objs / "asan_preinit.cpp.o").unlink()
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    _run([CC, "-shared", "-o", str(tmp), *map(str, sorted(objs.glob("*.o"))), "-Wl,--whole-archive",
          str(lib / "libclang_rt.asan_cxx-x86_64.a"), str(lib / "libclang_rt.fuzzer_no_main-x86_64.a"),
          "-Wl,--no-whole-archive", "-lpthread", "-ldl", "-lm", "-lrt", "-lstdc++"])
    os.replace(tmp, out)
    return out


def _py_include() -> str:
    return sysconfig.get_paths()["include"]


def build_ext() -> Path:
    """The sanitized extension, as .cache/sanitized/HASH/_tracecore{EXT_SUFFIX}."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = CACHE / "sanitized" / _key("ext", "no runtime linked") / f"_tracecore{suffix}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    # no runtime linked in: its symbols come from the one preloaded (ASan's, or ASan's with libFuzzer's)
    _run([CC, *SAN, "-fPIC", "-shared", "-Wall", f"-I{_py_include()}",
          *map(str, sorted(TRACECORE.glob("*.c"))), "-lpthread", "-o", str(tmp)])
    os.replace(tmp, out)
    return out


def build_fuzzer(name: str) -> Path:
    """A libFuzzer binary: tests/fuzz/NAME.c linked with the tracecore sources and an embedded CPython
    (the readers' entry points are the module's functions)."""
    src = FUZZ / f"{name}.c"
    key = _key("fuzzer", src.read_bytes().decode())
    out = CACHE / "fuzz" / key / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    libdir = sysconfig.get_config_var("LIBDIR")
    ver = sysconfig.get_config_var("LDVERSION")
    tmp = out.with_name(f".{name}.{os.getpid()}")
    _run([CC, "-fsanitize=fuzzer,address,undefined", *SAN[1:], "-Wall", f"-I{_py_include()}", f"-I{TRACECORE}",
          f'-DPYHOME="{sys.base_prefix}"', str(src), *map(str, sorted(TRACECORE.glob("*.c"))),
          f"-L{libdir}", f"-lpython{ver}", f"-Wl,-rpath,{libdir}", "-lpthread", "-ldl", "-lm", "-o", str(tmp)])
    os.replace(tmp, out)
    return out


def sanitized_env(ext: Path, base: dict[str, str] | None = None, fuzzer: bool = False) -> dict[str, str]:
    """The environment of a Python process that uses the sanitized extension (fuzzer: under atheris)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = str(asan_with_fuzzer()) if fuzzer else asan_runtime()
    env["ASAN_OPTIONS"] = ASAN_OPTIONS
    env["UBSAN_OPTIONS"] = UBSAN_OPTIONS
    env["IOSCOPE_SANITIZED_TRACECORE"] = str(ext)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FUZZ / "site"), env.get("PYTHONPATH", "")) if p)
    return env


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["ext"]:
            print(build_ext())
        elif argv[:1] == ["fuzzer"] and len(argv) == 2:
            print(build_fuzzer(argv[1]))
        elif argv[:1] == ["env"]:
            for k, v in sanitized_env(build_ext(), {}).items():
                print(f"{k}={v}")
        else:
            sys.stderr.write(__doc__ or "")
            return 2
    except BuildError as exc:
        sys.stderr.write(f"build: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
