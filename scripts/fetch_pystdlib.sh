#!/usr/bin/env bash
# Real text that needs no network: the Python standard library's own source (.py files), as a
# byte-level dataset in data/pystdlib-byte/ (git-ignored). Code has structure that spans a
# context (indentation, brackets, names defined above and used below), which is where depth can
# pay. The interpreter that prepares it is the one whose library is read; the Python version is
# printed and stored in the data directory's sources.txt (the corpus differs between versions).
#
# Usage: scripts/fetch_pystdlib.sh [OUT]    (default OUT: data/pystdlib-byte)
#        PYTHON=python3 scripts/fetch_pystdlib.sh   to use another interpreter than .venv's
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-data/pystdlib-byte}
PYTHON=${PYTHON:-.venv/bin/python}
STDLIB=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
VERSION=$("$PYTHON" -c 'import platform; print(platform.python_version())')
echo "Python $VERSION standard library from: $STDLIB"

# Library modules only: no tests, no bundled third-party code, no installed packages.
mapfile -t files < <(
    find "$STDLIB" -name '*.py' -type f \
        -not -path '*/site-packages/*' -not -path '*/test/*' -not -path '*/tests/*' \
        -not -path '*/idle_test/*' -not -path '*/__pycache__/*' -not -path '*/ensurepip/*' \
        | LC_ALL=C sort
)
echo "${#files[@]} files"
"$PYTHON" -m fixedfirst prepare "${files[@]}" --val-fraction 0.05 --out "$OUT"
printf 'Python %s standard library (%s), %d .py files\n' "$VERSION" "$STDLIB" "${#files[@]}" \
    >"$OUT/sources.txt"
