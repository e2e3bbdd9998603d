#!/usr/bin/env bash
# Command 1: install everything ioscope needs (Debian 12, as root) and run its
# main job on the built-in demo workload.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
for exe in .venv/bin/ioscope .venv/bin/ioscope-*; do   # ioscope, and ioscope-TOOL for every tool
    ln -sf "$PWD/$exe" "/usr/local/bin/$(basename "$exe")"
done
install -D -m 0644 -t /usr/local/share/doc/ioscope docs/*.md   # contrib's units name these pages
exec .venv/bin/ioscope demo
