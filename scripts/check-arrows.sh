#!/usr/bin/env bash
# Checks that the arrows point down (docs/ARCHITECTURE.md): every source of a library includes headers of its own
# library and of the libraries below it only. Prints each upward include as "file:line: includes X (may use: ...)"
# and exits 1 when there is one. Usage: scripts/check-arrows.sh [source-dir]; ctest runs it as the test `arrows`.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# Which headers a source may include, by the longest matching path prefix: "prefix|allowed ... !refused ...".
# An include is allowed when it starts with an allowed prefix and with no refused one. Includes whose first folder is
# not one of qtune's (a device header's "gemm/ptx.cuh", relative to kernels/device/) are the folder's own.
rules=(
  "kernels/|kernels/"
  "search/|kernels/ search/"
  "db/|kernels/ db/"
  "tuner/jit/|kernels/ tuner/jit/"
  "tuner/runtime/|kernels/ tuner/runtime/"
  "tuner/gemm/gemm_runner|kernels/ tuner/jit/ tuner/runtime/ tuner/gemm/gemm_runner"
  "reports/selection_table|kernels/ reports/selection_table"
  "reports/|kernels/ search/ db/ reports/"
  "tuner/production/|kernels/ tuner/jit/ tuner/runtime/ tuner/gemm/gemm_runner reports/selection_table tuner/production/"
  "tuner/|kernels/ search/ db/ tuner/ !tuner/cli/ !tuner/production/ !tuner/bench/ !tuner/main/ !tuner/peers/"
  "tuner/measure/|kernels/ search/ db/ tuner/ !tuner/providers/ !tuner/baselines/ !tuner/tune/ !tuner/cli/ !tuner/production/ !tuner/bench/ !tuner/main/ !tuner/peers/"
  "tuner/providers/|kernels/ search/ db/ tuner/ !tuner/baselines/ !tuner/tune/ !tuner/cli/ !tuner/production/ !tuner/bench/ !tuner/main/ !tuner/peers/"
  "tuner/baselines/|kernels/ search/ db/ tuner/ !tuner/tune/ !tuner/cli/ !tuner/production/ !tuner/bench/ !tuner/main/ !tuner/peers/"
  "tuner/peers/|kernels/ search/ db/ tuner/ !tuner/cli/ !tuner/production/ !tuner/bench/ !tuner/main/"
  "tuner/cli/|kernels/ search/ db/ reports/ tuner/ !tuner/bench/ !tuner/main/"
  "tuner/bench/|kernels/ search/ db/ reports/ tuner/ !tuner/main/"
  "tuner/main/|tuner/cli/"
)
top_folders="kernels search db tuner reports"

rule_for() {  # sets `rule` to the allowed/refused list of the longest prefix that matches $1
  local file=$1 best_length=0 entry prefix
  rule=""
  for entry in "${rules[@]}"; do
    prefix=${entry%%|*}
    if [[ $file == "$prefix"* && ${#prefix} -gt $best_length ]]; then
      rule=${entry#*|}
      best_length=${#prefix}
    fi
  done
}

allowed() {  # allowed INCLUDE RULE
  local include=$1 entry ok=1
  for entry in $2; do
    if [[ $entry == !* ]]; then
      [[ $include == "${entry#!}"* ]] && return 1
    elif [[ $include == "$entry"* ]]; then
      ok=0
    fi
  done
  return $ok
}

upward=0
while IFS= read -r found; do
  file=${found%%:*}
  rest=${found#*:}
  line=${rest%%:*}
  include=${rest#*\"}
  include=${include%%\"*}
  [[ " $top_folders " == *" ${include%%/*} "* ]] || continue
  rule_for "$file"
  [[ -n $rule ]] || continue
  if ! allowed "$include" "$rule"; then
    echo "$file:$line: includes $include (may use: $rule)"
    upward=1
  fi
done < <(grep -rn --include='*.cpp' --include='*.hpp' --include='*.cuh' -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' \
           kernels search db tuner reports | sort)

if ((upward)); then
  echo "upward includes found: move the code down to the library that owns it, or correct docs/ARCHITECTURE.md and this table" >&2
  exit 1
fi
echo "arrows point down"
