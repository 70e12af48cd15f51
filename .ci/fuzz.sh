#!/usr/bin/env bash
# Runs every fuzz target of the module for a short time each (default 8s).
set -euo pipefail
cd "$(dirname "$0")/.."
t="${1:-8s}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($t)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >"$log" 2>&1 || { cat "$log"; exit 1; }
  done
done
