#!/usr/bin/env bash
# Runs the test command given as arguments, then prints one closing line with the totals of
# every `cargo test` result line, so the summary is not a doc-test run that found nothing.
set -uo pipefail
log=$(mktemp)
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
     END { printf "\ntests: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
