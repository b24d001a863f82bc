#!/usr/bin/env bash
# The main job: install what is missing, build, tune the local GPU into ./qtune.db, bench cuBLASLt on the tuned
# shapes, then write the report.
# Override what is tuned with QTUNE_FORMATS (default w4a16-int4-ch) and QTUNE_MODEL (default llama-3-70b).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
build_dir=${QTUNE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target qtune
qtune="$build_dir/bin/qtune"
db=${QTUNE_DB:-qtune.db}
# Model-guided search on 15% of each problem's candidates: replayed against exhaustive H200 tunes it found a
# winner within 2% of the optimum on every problem (docs/perf.md). Pass --strategy exhaustive to search it all.
"$qtune" tune --gpu auto --format "${QTUNE_FORMATS:-w4a16-int4-ch}" --model "${QTUNE_MODEL:-llama-3-70b}" --db "$db" \
  --strategy model --budget-fraction 0.15 "$@"
# The report's headline compares the tuned table with cuBLASLt: bench it on every tuned shape at the M buckets,
# stored under the tuned format in the same database (the export's summary table lists format, N and K).
m_list=$(tr -d ' \n' <"${QTUNE_CONFIG_DIR:-configs}/m_buckets.json" | sed 's/.*"m_buckets":\[\([0-9,]*\)\].*/\1/')
"$qtune" export --db "$db" -o "$build_dir/tuned_table.json" | awk 'NR > 2 && NF == 0 { exit } NR > 2 { print $1, $2, $3 }' |
  while read -r format n k; do
    # A headline, not a benchmark's final figure: with bench's defaults this step took about 5 s per row on the
    # H200 (docs/perf.md), so it measures shorter (0.1 s, no stability blocks) and takes the datasheet bandwidth.
    "$qtune" bench --baseline cublaslt-f16 --format "$format" --shape "$n,$k" --m "$m_list" --db "$db" \
      --top-k 4 --min-time 0.1 --blocks 0 --clock-dip 0 --time-budget 0.5 --bandwidth datasheet </dev/null
  done
"$qtune" report --db "$db" -o report/
echo "report: report/index.html"
