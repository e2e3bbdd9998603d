#!/usr/bin/env bash
# Run a command with a CPU hog and a disk hog beside it, and return the command's status: the load the
# suite must pass under, twice in a row (issue 34; docs/hacking.md, "Under load").
#
#   scripts/hog.sh [-c BUSY_LOOPS] [-r RATE] [-d DIR] -- CMD [ARG...]
#
#   -c  busy loops (one CPU each; default 1)
#   -r  the disk hog's rate, fio's --rate for reads and for writes alike (default 20m: 40 MB/s in all)
#   -d  where the disk hog's 1 GiB file goes (default /var/tmp: the root disk, not the tmpfs that holds
#       the suite's loop disks)
#
# The disk hog is fio: random 64 KiB reads and writes, half each, O_DIRECT (the page cache would absorb
# it). Both hogs are stopped and the file removed on every path: CMD's end, Ctrl-C, SIGTERM, SIGHUP.
set -euo pipefail
loops=1 rate=20m dir=/var/tmp
while getopts c:r:d: opt; do
    case $opt in
        c) loops=$OPTARG ;;
        r) rate=$OPTARG ;;
        d) dir=$OPTARG ;;
        *) echo "usage: $0 [-c BUSY_LOOPS] [-r RATE] [-d DIR] -- CMD [ARG...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = -- ] && shift
if [ $# = 0 ]; then
    echo "hog.sh: no command given: scripts/hog.sh -- ./test.sh" >&2
    exit 2
fi
case $loops in ''|*[!0-9]*) echo "hog.sh: -c wants a number of busy loops, not '$loops'" >&2; exit 2 ;; esac
command -v fio >/dev/null || { echo "hog.sh: fio not found: scripts/bootstrap.sh --test installs it" >&2; exit 1; }
[ -d "$dir" ] || { echo "hog.sh: -d $dir is not a directory" >&2; exit 2; }

file=$(mktemp "$dir/ioscope-hog.XXXXXX")
pids=()
stop() {
    [ ${#pids[@]} = 0 ] || kill "${pids[@]}" 2>/dev/null || true
    [ ${#pids[@]} = 0 ] || wait "${pids[@]}" 2>/dev/null || true
    pids=()
    rm -f "$file"
}
trap stop EXIT

for _ in $(seq "$loops"); do
    bash -c 'while :; do :; done' &
    pids+=($!)
done
fio --name=ioscope-hog --filename="$file" --size=1g --rw=randrw --rwmixread=50 --bs=64k --direct=1 \
    --ioengine=psync --rate="$rate,$rate" --time_based --runtime=7d --output=/dev/null &
pids+=($!)
echo "hog.sh: $loops busy loop(s) and a disk hog (fio, $rate/s reads and $rate/s writes on $file) beside: $*" >&2
# CMD in the background, waited for: a stop signal is passed on to it at once (a foreground command would
# hold the trap until it ended), and CMD's own status is returned once it has stopped
"$@" &
cmd=$!
for sig in INT TERM HUP; do
    # shellcheck disable=SC2064
    trap "kill -$sig $cmd 2>/dev/null || true" "$sig"
done
status=
while [ -z "$status" ]; do
    if wait "$cmd"; then
        status=0
    else
        rc=$?
        kill -0 "$cmd" 2>/dev/null && continue   # the wait was cut by a signal passed on: CMD still stopping
        status=$rc
    fi
done
exit "$status"
