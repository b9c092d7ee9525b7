#!/usr/bin/env bash
# Every e2e test on its own, each in a fresh pytest session (so on a fresh plane): a test that
# reads what another test made fails here, whatever order the suite runs in. One line a test:
#   PASS|FAIL|SKIP <seconds>s <node id>
# and exit 1 if any failed. Arguments narrow what is collected (default tests/e2e), e.g.
# `hack/e2e-alone.sh tests/e2e/test_controller.py` or `--ignore=tests/e2e/test_real_node.py`.
# Cost: the plane's start-up per test, about 40 s a test on 2 cores, an hour for the whole tier.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ $# -gt 0 ] || set -- tests/e2e
logs=$(mktemp -d "${TMPDIR:-/tmp}/e2e-alone.XXXXXX")
ids=$("$PY" -m pytest --collect-only -q -p no:randomly "$@" | grep '::') || { echo "e2e-alone: nothing collected from: $*" >&2; exit 2; }
echo "e2e-alone: $(wc -l <<<"$ids") tests, each on its own; outputs in $logs"
failed=0
n=0
while read -r id; do
  n=$((n + 1))
  began=$(date +%s)
  # -k, as a user selects one test: a `story` step then brings the steps it stands on. A
  # parametrized id has brackets -k cannot take, so it goes by node id.
  case $id in
    *\[*) select=("$id") ;;
    *) select=("${id%%::*}" -k "${id##*::}") ;;
  esac
  "$PY" -m pytest -q -p no:randomly "${select[@]}" >"$logs/$n.txt" 2>&1 </dev/null
  rc=$?
  if [ $rc -ne 0 ]; then state=FAIL; failed=$((failed + 1))
  elif grep -q ' passed' "$logs/$n.txt"; then state=PASS
  else state=SKIP; fi
  echo "$state $(($(date +%s) - began))s $id"
  [ $state = FAIL ] && tail -n 15 "$logs/$n.txt" | sed 's/^/    /'
done <<<"$ids"
echo "e2e-alone: $failed of $n failed on their own"
[ $failed -eq 0 ]
