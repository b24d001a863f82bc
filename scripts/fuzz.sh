#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, QTUNE_FUZZ=ON) and runs each for SECONDS
# (default 600) from its seed corpus, after replaying the inputs of earlier findings (tests/fuzz/regressions/<target>/).
# Exits 1 on any finding (crash, hang, leak, sanitizer report, an exception other than InputError), naming the target
# and the input libFuzzer kept. QTUNE_FUZZ_BUILD_DIR: the build (default build-fuzz); scratch corpora, findings and
# logs go to its fuzz-runs/. QTUNE_FUZZ_PARALLEL: how many targets run at a time (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${1:-600}
parallel=${QTUNE_FUZZ_PARALLEL:-1}
if [[ ! $fuzz_seconds =~ ^[1-9][0-9]*$ || ! $parallel =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: [QTUNE_FUZZ_PARALLEL=N] scripts/fuzz.sh [SECONDS]   (positive whole numbers)" >&2
  exit 2
fi
./scripts/install-deps.sh
build_dir=${QTUNE_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DQTUNE_FUZZ=ON -DCMAKE_C_COMPILER=clang \
      -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build_dir"
build_dir=$(realpath "$build_dir")
runs_dir=$build_dir/fuzz-runs
mapfile -t targets < "$build_dir/fuzz_targets.txt"

export QTUNE_CONFIG_DIR=$PWD/configs  # the import parser matches GPU names against the shipped profiles
export UBSAN_OPTIONS=print_stacktrace=1

# One target: replay its regressions, then fuzz. Writes fuzz-runs/<target>/{log,status}; never fails itself.
run_target() {
  local target=$1 dir=$runs_dir/$1 status=0
  rm -rf "$dir/findings" "$dir/log" "$dir/status"
  mkdir -p "$dir/corpus" "$dir/findings"
  local regressions=(tests/fuzz/regressions/"$target"/*)
  if [[ -e ${regressions[0]} ]]; then
    "$build_dir/bin/$target" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$dir/findings/" "${regressions[@]}" \
      > "$dir/log" 2>&1 || status=$?
  fi
  if ((status == 0)); then
    # New inputs go to the first (scratch) corpus; the committed seeds are only read.
    "$build_dir/bin/$target" "$dir/corpus" "tests/fuzz/corpus/$target" -max_total_time="$fuzz_seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 -artifact_prefix="$dir/findings/" >> "$dir/log" 2>&1 || status=$?
  fi
  echo "$status" > "$dir/status"
}

echo "fuzzing ${#targets[@]} targets for $fuzz_seconds s each, $parallel at a time (logs: $runs_dir/<target>/log)"
for target in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  run_target "$target" &
done
wait

passed=0
failed=0
for target in "${targets[@]}"; do
  dir=$runs_dir/$target
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n 1)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  if [[ $(cat "$dir/status" 2>/dev/null) == 0 ]]; then
    passed=$((passed + 1))
    echo "$target: passed, ${runs:-?} runs, scratch corpus $corpus inputs"
  else
    failed=$((failed + 1))
    echo "$target: FAILED (exit status $(cat "$dir/status" 2>/dev/null || echo '?'); log $dir/log)"
    grep -E "^(SUMMARY|==[0-9]+==ERROR|qtune fuzz finding|terminate called)|what\(\)" "$dir/log" | head -n 5 | sed 's/^/  /' || true
    for input in "$dir"/findings/*; do [[ -e $input ]] && echo "  crashing input: $input"; done
  fi
done
echo "fuzz: $passed passed, $failed failed (${#targets[@]} targets, $fuzz_seconds s each)"
((failed == 0))
