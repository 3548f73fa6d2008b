#!/bin/sh
# Smoke test of a benchmark program: runs it and checks that it exits 0 and that every
# expected pattern matches a line of its output. Times nothing.
# usage: smoke_test.sh PATTERN... -- PROGRAM [ARG...]   (PATTERN: grep -E regex)
set -u
patterns=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns="$patterns
$1"
  shift
done
if [ $# -lt 2 ]; then
  echo "usage: $0 PATTERN... -- PROGRAM [ARG...]" >&2
  exit 2
fi
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "smoke_test: '$1' exited with status $rc" >&2
  exit 1
fi
status=0
# Patterns are separated by newlines, so a pattern may hold spaces.
old_ifs=$IFS
IFS='
'
for p in $patterns; do
  if ! printf '%s\n' "$out" | grep -Eq -- "$p"; then
    echo "smoke_test: no output line matches '$p'" >&2
    status=1
  fi
done
IFS=$old_ifs
exit $status
