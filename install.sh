#!/usr/bin/env bash
# Command 1: install everything ioscope needs (Debian 12, as root) and run its
# main job on the built-in demo workload.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
ln -sf "$PWD/.venv/bin/ioscope" /usr/local/bin/ioscope
exec .venv/bin/ioscope demo
