#!/usr/bin/env bash
# Installs the Debian packages qtune builds against; safe to run again (installs only what is missing).
set -euo pipefail
# chromium: the report test renders report/index.html headless and checks the screenshot and the DOM.
# clang, libclang-rt-dev: scripts/fuzz.sh builds the parsers' fuzz targets with libFuzzer and the sanitizers.
# libssl-dev: SHA-256 of the kernel cache's keys (libcrypto.a, linked statically). libboost-dev: Boost.Math's Student-t
# distribution for the measurement statistics (header-only).
packages=(cmake ninja-build g++ libsqlite3-dev nlohmann-json3-dev libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev chromium
          clang libclang-rt-dev libssl-dev libboost-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=(); [[ $(id -u) == 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "error: the CUDA 13 toolkit is expected in /usr/local/cuda (NVRTC, CUPTI, cuBLASLt headers and libraries)" >&2
  exit 1
fi
