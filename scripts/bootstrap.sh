#!/usr/bin/env bash
# Install what ioscope needs on Debian 12, as root; idempotent and quiet when
# everything is already there. Used by install.sh and, with --test, by test.sh.
#   - Debian packages: the BPF build chain (clang, llvm, libbpf-dev, pkg-config),
#     Python headers and venv, bpftrace (agg --bpftrace runs it), fio (the demo's workload).
#   - With --test, also the peers and tools the tests compare against or use
#     (blktrace, sysstat, tmux, xfsprogs, btrfs-progs, a Prometheus server and node_exporter, Java for pyspark,
#     openssl, htpasswd, systemd-analyze and libseccomp for the exporter's TLS and unit tests), and what
#     the kernel matrix boots Debian's kernels with (QEMU, busybox, kmod; virtme-ng from PyPI). The
#     Prometheus packages' own services are not started: the tests start their own servers.
#   - A virtualenv in .venv with ioscope installed in editable mode (this builds
#     the C extension and compiles bpf/*.bpf.c), plus, with --test, the test tools
#     of requirements-dev.txt (pytest, ruff, mypy, and pyspark for ioscope fleet's tests).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: run as root (it installs Debian packages and loads BPF programs): sudo $0" >&2
    exit 1
fi

PKGS="clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config make gcc linux-libc-dev python3 python3-dev python3-venv
      git bpftool bpftrace fio e2fsprogs util-linux util-linux-extra procps"
TEST_PKGS="blktrace sysstat tmux xfsprogs btrfs-progs prometheus openjdk-17-jre-headless time libclang-rt-14-dev
           qemu-system-x86 busybox-static kmod iproute2 debian-archive-keyring bpfcc-tools udev chromium
           prometheus-node-exporter openssl apache2-utils libcap2-bin systemd libseccomp2 curl linux-perf libfuse2"
want=$PKGS
if [ "${1:-}" = --test ]; then
    want="$PKGS $TEST_PKGS"
fi
missing=""
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "bootstrap: installing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # no service of a package (prometheus) may start on the machine: Debian's policy-rc.d hook
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && own_policy=1
    fi
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing >/dev/null || { [ -z "$own_policy" ] || rm -f $policy; exit 1; }
    [ -z "$own_policy" ] || rm -f $policy
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel >/dev/null
if [ "${1:-}" = --test ]; then   # the test tools and peers (pytest, ruff, mypy, pyspark): not for the install
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt >/dev/null
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation -e . >/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
echo "bootstrap: ioscope $(.venv/bin/ioscope --version | cut -d' ' -f2) installed in $PWD/.venv"
