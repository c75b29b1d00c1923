#!/usr/bin/env bash
# The test entry point: installs missing Debian packages (tools/packages.txt),
# configures and builds ftld, compiles it once more with clang's thread-safety
# analysis, and runs every test with ctest.
# Build directory: $FTL_BUILD_DIR (default "build"). Exits non-zero on any
# failure. Installing packages needs root (or sudo).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${FTL_BUILD_DIR:-build}"

tools/install-packages.sh

# --- build and test -----------------------------------------------------------
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir"

# --- clang thread-safety build ------------------------------------------------
# Only clang checks the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED
# annotations. A second build dir ($FTL_TSA_BUILD_DIR, default "build-tsa";
# FTL_TSA=0 skips it) builds the libraries and programs (not tests/ or
# bench/) with clang, a thread-safety warning failing the run.
if [[ "${FTL_TSA:-1}" != 0 ]]; then
  tsa_dir="${FTL_TSA_BUILD_DIR:-build-tsa}"
  CC=clang CXX=clang++ cmake -S . -B "$tsa_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety"
  cmake --build "$tsa_dir" --target ftl_core ftld ftlctl ftl-tool
fi

ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j2
