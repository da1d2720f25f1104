#!/usr/bin/env bash
# Prints the version a tool module under test/tools pins: version.sh <dir> <module path>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
v=$(sed -nE "s#^[[:space:]]*(require[[:space:]]+)?$2[[:space:]]+(v[^[:space:]]+).*#\2#p" "$here/$1/go.mod" | head -n1)
[ -n "$v" ] || { echo "no version of $2 in test/tools/$1/go.mod" >&2; exit 1; }
echo "$v"
