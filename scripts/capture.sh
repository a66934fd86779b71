#!/usr/bin/env bash
# Capture every link of a cluster (or one LINK/NODE) into one pcapng.
#   scripts/capture.sh OUT.pcapng [all|LINK|NODE] [--cluster C] [--duration S]
# Stops on Ctrl-C or after --duration. Needs root. Without LINK/NODE (options may
# follow OUT directly) every link is captured.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
emu=${EMU:-$here/.venv/bin/emu}
out=${1:?usage: capture.sh OUT.pcapng [all|LINK|NODE] [options]}
shift
what=all
# the target is optional: an option in its place (--cluster …) is an option, not a target
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    what=${1:-all}
    shift
fi
exec "$emu" capture "$what" -w "$out" "$@"
