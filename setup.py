"""Build and install ioscope.

Two things are built here, both at build time and never on the target host:
- ioscope.kernel._libbpf, a CPython extension over the system libbpf (pkg-config libbpf);
- the BPF objects, bpf/*.bpf.c compiled with clang against the committed
  bpf/vmlinux.h (CO-RE), shipped as package data in ioscope/bpfobj/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BPF_DIR = ROOT / "bpf"
OBJ_DIR = ROOT / "lib" / "ioscope" / "bpfobj"


def _version() -> str:
    ns: dict[str, str] = {}
    exec((ROOT / "lib" / "ioscope" / "_version.py").read_text(), ns)
    return ns["__version__"]


def _executables() -> list[str]:
    """`ioscope` and one `ioscope-TOOL` per tool of the registry (lib/ioscope/registry.py imports nothing, so
    it is read here before the package is built); each runs cli.main, which takes the tool from its name."""
    src = ROOT / "lib" / "ioscope" / "registry.py"
    mod = type(sys)("ioscope_registry")
    sys.modules["ioscope_registry"] = mod   # dataclasses look the module up while the class is made
    exec(compile(src.read_text(), str(src), "exec"), mod.__dict__)
    return ["ioscope=ioscope.cli:main", *(f"ioscope-{t.name}=ioscope.cli:main" for t in mod.TOOLS)]


def _pkg_config(*args: str) -> list[str]:
    try:
        out = subprocess.run(["pkg-config", *args, "libbpf"], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"setup.py: pkg-config cannot find libbpf ({exc}); install libbpf-dev and pkg-config")
    return out.stdout.split()


def compile_bpf() -> None:
    """Compile every bpf/*.bpf.c into lib/ioscope/bpfobj/*.bpf.o when out of date."""
    clang = os.environ.get("CLANG", "clang")
    if shutil.which(clang) is None:
        sys.exit("setup.py: clang not found; install clang and llvm (BPF programs are compiled at build time)")
    arch = {"x86_64": "x86", "aarch64": "arm64", "ppc64le": "powerpc", "s390x": "s390"}.get(os.uname().machine, "x86")
    OBJ_DIR.mkdir(parents=True, exist_ok=True)
    headers = list(BPF_DIR.glob("*.h"))
    newest_header = max(h.stat().st_mtime for h in headers)
    for src in sorted(BPF_DIR.glob("*.bpf.c")):
        obj = OBJ_DIR / (src.name[: -len(".c")] + ".o")
        # a .bpf.c may include another (readahead_noloop.bpf.c: readahead.bpf.c without bpf_loop)
        deps = [src, *(BPF_DIR / n for n in re.findall(r'#include "(\w+\.bpf\.c)"', src.read_text()))]
        if obj.exists() and obj.stat().st_mtime > max(*(d.stat().st_mtime for d in deps), newest_header):
            continue
        cmd = [
            clang, "-g", "-O2", "-Wall", "-Werror", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
            "-I", str(BPF_DIR), *[f for f in _pkg_config("--cflags-only-I")], "-c", str(src), "-o", str(obj),
        ]
        print(" ".join(cmd))
        subprocess.run(cmd, check=True)
        # BTF stays (CO-RE needs it); only DWARF goes.
        subprocess.run(["llvm-strip", "-g", str(obj)], check=False)


class BuildExt(build_ext):
    def run(self) -> None:
        compile_bpf()
        super().run()


class BuildPy(build_py):
    def run(self) -> None:
        compile_bpf()
        super().run()


setup(
    name="ioscope",
    version=_version(),
    description="eBPF block I/O tracing toolkit: latency, traces, readahead, live views",
    python_requires=">=3.9",
    package_dir={"": "lib"},
    packages=find_packages("lib"),
    package_data={"ioscope": ["bpfobj/*.bpf.o", "py.typed"], "ioscope.kernel": ["_libbpf.pyi"],
                  "ioscope.capture": ["_tracecore.pyi"]},
    ext_modules=[
        Extension(
            "ioscope.kernel._libbpf",
            sources=["lib/ioscope/kernel/_libbpf.c"],
            extra_compile_args=["-Wall", "-Wno-missing-field-initializers", *_pkg_config("--cflags")],
            extra_link_args=_pkg_config("--libs"),
        ),
        # the sequential loops of the offline tools (btt's pairing, blktrace record scanning, blkparse
        # lines), plain C, no libraries
        Extension("ioscope.capture._tracecore",
                  sources=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lib/ioscope/capture/tracecore").glob("*.c")),
                  depends=sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lib/ioscope/capture/tracecore").glob("*.h")),
                  extra_compile_args=["-Wall", "-O2"]),
    ],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
    install_requires=["numpy>=1.22", "rich>=12", "pyarrow>=14", "prometheus-client>=0.16",
                      "pyelftools>=0.29", "pyroute2>=0.7", "duckdb>=1.1",
                      "vl-convert-python>=1.6", "h11>=0.14", "bcrypt>=4", "pyyaml>=6"],
    entry_points={"console_scripts": _executables()},
)
