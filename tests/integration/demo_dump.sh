#!/usr/bin/env bash
# demo_dump.sh - a verified MoE refit, then agent 0's live tensors checked
# bit for bit against the independent numpy reference (check_dump.py).
#
# usage: demo_dump.sh DEMO PYTHON CHECK_DUMP [DEMO ARGS...]
set -euo pipefail

demo=$1
python=$2
check=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$demo" --dump "$dir/dump" "$@"
"$python" "$check" "$dir/dump"
