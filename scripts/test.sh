#!/usr/bin/env bash
# The test entry point: installs missing Debian packages (scripts/packages.txt),
# configures and builds ftld, and runs every test with ctest.
# Build directory: $FTL_BUILD_DIR (default "build"). Exits non-zero on any
# failure. Installing packages needs root (or sudo).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${FTL_BUILD_DIR:-build}"

# --- packages ---------------------------------------------------------------
packages=()
while read -r line || [[ -n "$line" ]]; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [[ -n "$line" ]] && packages+=("$line")
done < scripts/packages.txt

missing=()
for pkg in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  [[ "$status" == installed ]] || missing+=("$pkg")
done

if ((${#missing[@]} > 0)); then
  echo "test.sh: installing missing packages: ${missing[*]}"
  sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "test.sh: need root to install packages" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update
  "${sudo[@]}" apt-get install -y "${missing[@]}"
fi

# --- build and test -----------------------------------------------------------
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir"
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j2
