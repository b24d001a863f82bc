#!/usr/bin/env bash
# Copies the built executables (stripped) and the libraries they need beside them into .gpu/, the folder the
# device tool carries to the GPU machine. Usage: scripts/gpu-bundle.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
rm -rf .gpu && mkdir -p .gpu
for exe in "$build_dir"/bin/*; do
  [[ -f $exe && -x $exe ]] || continue
  strip --strip-debug -o ".gpu/$(basename "$exe")" "$exe"
done
cp -L "$build_dir"/bin/libbenchmark.so.1debian .gpu/ 2>/dev/null || true
# The runtime example links libqtune_runtime.so: run it there with LD_LIBRARY_PATH=$PWD/.gpu (e.g. under ncu, which
# cannot profile qtune itself: CUPTI allows one subscriber).
if [[ -f "$build_dir"/tuner/production/libqtune_runtime.so ]]; then
  strip --strip-debug -o .gpu/libqtune_runtime.so "$build_dir"/tuner/production/libqtune_runtime.so
fi
du -sh .gpu
