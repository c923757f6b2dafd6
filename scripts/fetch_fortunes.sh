#!/usr/bin/env bash
# Real English text for CPU experiments without any hub: Debian's fortune-cookie databases
# (packages `fortunes` and `fortunes-min`; the `fortunes-off` collection is left out).
#
# The packages are downloaded, not installed: `apt-get download` + `dpkg -x` unpack them into
# data/raw/fortunes/ (no root needed once apt's package lists exist), and `fixedfirst prepare`
# turns the fortune files, one document per fortune (entries end at a line holding `%`), into the
# byte-level dataset data/fortunes-byte/. Both directories are git-ignored.
#
# Usage: scripts/fetch_fortunes.sh [OUT]    (default OUT: data/fortunes-byte)
#        PYTHON=python3 scripts/fetch_fortunes.sh   to use another interpreter than .venv's
set -euo pipefail
cd "$(dirname "$0")/.."

RAW=data/raw/fortunes
OUT=${1:-data/fortunes-byte}
PYTHON=${PYTHON:-.venv/bin/python}
TEXT_DIR=$RAW/usr/share/games/fortunes

if [ ! -d "$TEXT_DIR" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    chmod a+rwx "$work"  # apt downloads as its own unprivileged user when run as root
    if ! (cd "$work" && apt-get download fortunes fortunes-min); then
        echo "fetch_fortunes: apt-get download failed; run 'apt-get update' (as root) first" >&2
        exit 1
    fi
    mkdir -p "$work/root"
    for deb in "$work"/*.deb; do
        dpkg -x "$deb" "$work/root"
        echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$work/root/PACKAGES"
    done
    mkdir -p "$(dirname "$RAW")"
    rm -rf "$RAW"
    mv "$work/root" "$RAW"  # whole or not at all
fi
echo "fortunes text from: $(tr '\n' ' ' <"$RAW/PACKAGES")"

# The plain files only: *.dat are binary indexes, *.u8 are symbolic links to the same text.
mapfile -t files < <(find "$TEXT_DIR" -maxdepth 1 -type f ! -name '*.dat' | sort)
"$PYTHON" -m fixedfirst prepare "${files[@]}" --separator % --val-fraction 0.05 --out "$OUT"
