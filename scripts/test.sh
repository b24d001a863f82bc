#!/usr/bin/env bash
# Installs what is missing, builds qtune with warnings as errors, and runs every test suite.
# GPU tests skip with a reason on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build_dir=${QTUNE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQTUNE_WERROR=ON >/dev/null
cmake --build "$build_dir"
ctest --test-dir "$build_dir" --output-on-failure "$@"
