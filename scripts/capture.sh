#!/usr/bin/env bash
# Capture every link of a cluster (or one LINK/NODE) into one pcapng.
#   scripts/capture.sh OUT.pcapng [all|LINK|NODE] [--cluster C] [--duration S]
# Stops on Ctrl-C or after --duration. Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
emu=${EMU:-$here/.venv/bin/emu}
out=${1:?usage: capture.sh OUT.pcapng [all|LINK|NODE] [options]}
shift
what=${1:-all}
[ $# -gt 0 ] && shift
exec "$emu" capture "$what" -w "$out" "$@"
