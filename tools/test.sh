#!/usr/bin/env bash
# The test entry point: installs missing Debian packages (tools/packages.txt),
# configures and builds ftld, and runs every test with ctest.
# Build directory: $FTL_BUILD_DIR (default "build"). Exits non-zero on any
# failure. Installing packages needs root (or sudo).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${FTL_BUILD_DIR:-build}"

tools/install-packages.sh

# --- build and test -----------------------------------------------------------
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir"
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j2
