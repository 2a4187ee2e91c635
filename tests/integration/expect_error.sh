#!/usr/bin/env bash
# usage: expect_error.sh REGEX CMD ARGS...
# Passes when CMD exits non-zero (and not by a signal), prints exactly one line on stderr, and that line
# matches REGEX (grep -E). This is the contract for bad input (docs/contracts.md; docs/invariants.md, invariant 3).
set -u
regex="$1"; shift
err="$(mktemp)"
"$@" > /dev/null 2> "$err"
rc=$?
lines=$(grep -c '' "$err")
msg="$(cat "$err")"
rm -f "$err"
echo "exit code: $rc"; echo "stderr: $msg"
if [ "$rc" -eq 0 ]; then echo "FAILED: exit code 0, should be non-zero"; exit 1; fi
if [ "$rc" -ge 128 ]; then echo "FAILED: killed by a signal ($rc)"; exit 1; fi
if [ "$lines" -ne 1 ]; then echo "FAILED: $lines lines on stderr, should be 1"; exit 1; fi
if ! grep -Eq -- "$regex" <<< "$msg"; then echo "FAILED: message does not match /$regex/"; exit 1; fi
echo "VALID"
