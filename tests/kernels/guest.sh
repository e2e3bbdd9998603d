#!/bin/sh
# Runs inside a kernel of the matrix (scripts/kernels.py boots it with
# virtme-ng over the host's root file system, read-only but for OUT and the
# overlays over /etc, /tmp, /var). Prepares what the live tests need, as the
# host has it, then runs them (or, with --exec, one command) and leaves the
# exit code in OUT/rc: virtme-ng does not pass it back.
#   guest.sh OUT [PYTEST ARGS]        the guest suite; OUT/junit.xml, OUT/pytest.log
# IOSCOPE_GUEST_CGROUP=v2: the io controller on cgroup v2 (the unified hierarchy at /sys/fs/cgroup, as
# Debian 11+, RHEL 9 and Ubuntu 22.04+ mount it) instead of v1 blkio beside an io-less v2 (the host's).
#   guest.sh --exec OUT CMD [ARGS]    one command, its output on the console
mode=pytest
if [ "$1" = --exec ]; then mode=exec; shift; fi
out=$1; shift
cd "$(dirname "$0")/../.." || exit 1
rm -f "$out/rc"

# loop devices, tracefs, a tmpfs for backing files, cgroups as the host mounts them
modprobe loop max_loop=64 2>/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
mountpoint -q /dev/shm || mount -t tmpfs -o size=3G tmpfs /dev/shm
if [ "${IOSCOPE_GUEST_CGROUP:-v1}" = v2 ]; then
    for m in /sys/fs/cgroup/blkio /sys/fs/cgroup/unified /sys/fs/cgroup; do umount "$m" 2>/dev/null; done
    mount -t cgroup2 cgroup2 /sys/fs/cgroup
    echo "+io +memory" >/sys/fs/cgroup/cgroup.subtree_control
    grep -qw io /sys/fs/cgroup/cgroup.subtree_control || echo "guest: io is not on cgroup v2" >&2
elif ! mountpoint -q /sys/fs/cgroup/blkio; then
    umount /sys/fs/cgroup 2>/dev/null
    mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
    mkdir -p /sys/fs/cgroup/blkio /sys/fs/cgroup/unified
    mount -t cgroup -o blkio cgroup /sys/fs/cgroup/blkio
    mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified
fi
ip link set lo up 2>/dev/null
# virtme-ng starts udevd when the host has it installed: it would probe every new loop device
# (blkid reads), I/O the exact-count tests do not expect. The guest runs like the host: no udevd.
if command -v udevadm >/dev/null 2>&1; then
    udevadm settle --timeout=30 2>/dev/null
    udevadm control --exit 2>/dev/null
fi
# no .pyc writes on the read-only tree; pytest's cache off
export PYTHONDONTWRITEBYTECODE=1 HOME=/tmp TMPDIR=/tmp
export CI="${CI:-1}"
export IOSCOPE_GUEST=1  # tests scale time budgets meant for real hardware (conftest.EMULATION_FACTOR)
echo "guest: $(uname -r), lockdown: $(cat /sys/kernel/security/lockdown 2>/dev/null || echo none)," \
    "cgroup: ${IOSCOPE_GUEST_CGROUP:-v1}" >"$out/kernel"

if [ $mode = exec ]; then
    "$@"
    echo $? >"$out/rc"
    exit 0
fi
# hypothesis' plugin off: no guest test uses it, and importing it was half of pytest's start-up (0.7 of
# 1.4 s of CPU on the host for the guest suite's collection; about 100 times that under TCG, per boot)
.venv/bin/python -m pytest -p no:cacheprovider -p no:hypothesispytest -q -o addopts="" -rfEs --durations=10 \
    --junitxml="$out/junit.xml" "$@" >"$out/pytest.log" 2>&1
echo $? >"$out/rc"
