#!/usr/bin/env bash
# Tear down an emulated cluster (all of them with --all). Needs root.
#   scripts/cluster-down.sh [CLUSTER|--all]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
emu=${EMU:-$here/.venv/bin/emu}
if [ "${1:-}" = "--all" ]; then
    shift
    # `emu clean` alone removes leftovers only; --all tears down the clusters that are up
    exec "$emu" clean --all "$@"
fi
exec "$emu" down "$@"
