#!/usr/bin/env bash
# Bring up an emulated cluster from a topology file (default: namespaces/leaf-spine.toml).
#   scripts/cluster-up.sh [TOPOLOGY] [--name C] [--set k=v ...]
# Prints the cluster's status when it is up. Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
emu=${EMU:-$here/.venv/bin/emu}
topology=${1:-$here/namespaces/leaf-spine.toml}
[ $# -gt 0 ] && shift
"$emu" up "$topology" "$@"
