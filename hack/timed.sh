#!/usr/bin/env bash
# Runs one stage of `make test` and says how long it took, so a slow CI run shows where the time went.
#   hack/timed.sh "stage name" command [args...]
set -uo pipefail
name="$1"; shift
began=$SECONDS
printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$name"
"$@"
status=$?
printf '<== %s: %ds (exit %d)\n' "$name" "$((SECONDS - began))" "$status"
exit "$status"
