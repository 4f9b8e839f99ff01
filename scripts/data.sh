#!/usr/bin/env bash
# Prepares the finetune datasets from Debian packages: scripts/data.sh [BUILD_DIR] [xg-data flags]
# Downloads r-cran-janeaustenr and wordnet-base with apt-get download (no install, no R),
# extracts them with dpkg -x and runs xg-data. Everything lives under BUILD_DIR/data
# (debs/, pkgs/, the datasets, manifest.json). Idempotent: done steps are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD="${1:-build}"
shift || true
DATA="$BUILD/data"
DEBS="$DATA/debs"
PKGS="$DATA/pkgs"
PACKAGES=(r-cran-janeaustenr wordnet-base)
mkdir -p "$DEBS" "$PKGS"

# 1. Download the .deb files (apt-get download needs no root; `update` only when the lists
#    are missing or stale and the download failed).
missing=()
for p in "${PACKAGES[@]}"; do
  compgen -G "$DEBS/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "data: downloading ${missing[*]}"
  if ! (cd "$DEBS" && apt-get download "${missing[@]}" 2>/dev/null); then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "data: apt-get download failed; running apt-get update"
    $SUDO apt-get update -qq
    (cd "$DEBS" && apt-get download "${missing[@]}")
  fi
fi

# 2. Extract each package once (a stamp per .deb file).
for deb in "$DEBS"/*.deb; do
  stamp="$PKGS/.$(basename "$deb").extracted"
  if [[ ! -f "$stamp" ]]; then
    echo "data: extracting $(basename "$deb")"
    dpkg -x "$deb" "$PKGS"
    touch "$stamp"
  fi
done

# 3. Build xg-data and write the datasets, unless they were written by this same xg-data
#    binary (by content: a relink that changes nothing keeps them) from the same packages
#    with the same flags.
[[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S . -B "$BUILD" >/dev/null
cmake --build "$BUILD" --target xg-data -j "$(nproc)" >/dev/null
TOOL="$BUILD/bin/xg-data"
STAMP="$(sha256sum "$TOOL" | cut -d' ' -f1) $(cd "$DEBS" && echo *.deb) args: $*"
if [[ -f "$DATA/manifest.json" && -f "$DATA/summary.txt" && "$(cat "$DATA/.xg-data-stamp" 2>/dev/null)" == "$STAMP" ]]; then
  echo "data: datasets up to date in $DATA"
  cat "$DATA/summary.txt"
  exit 0
fi
start=$(date +%s)
rm -f "$DATA/.xg-data-stamp"
"$TOOL" --pkgs "$PKGS" --out "$DATA" "$@" > "$DATA/summary.txt.tmp"
mv "$DATA/summary.txt.tmp" "$DATA/summary.txt"
printf '%s' "$STAMP" > "$DATA/.xg-data-stamp"
cat "$DATA/summary.txt"
echo "data: wrote $DATA in $(($(date +%s) - start)) s"
