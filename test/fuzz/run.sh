#!/usr/bin/env bash
# Runs one libFuzzer target with its flags (README.md here).
#
#   run.sh ci FUZZER TARGET WORKDIR        CI (ctest -L fuzz): the regression inputs once each,
#                                          then the seed corpus and a fixed -seed and -runs;
#                                          fails on any finding
#   run.sh fuzz FUZZER TARGET WORKDIR [libFuzzer flags...]
#                                          open-ended fuzzing (no pass/fail): the corpus grows in
#                                          WORKDIR/corpus-TARGET, crashes land in WORKDIR/
#   run.sh flags TARGET                    prints the target's flags
#
# Regression inputs listed in known_failures.txt are skipped, saying so: they
# still crash the current code, and come off the list with the fix.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

# Per target: seed corpus, dictionary, -max_len, -timeout (s), CI's -runs.
# The model targets' seeds are far above libFuzzer's default max_len of 4096;
# -timeout is a few times the slowest seed's time under the sanitizers (plan
# and model seeds take up to 1-2 s in onnx_plan).
target_flags() {
  case "$1" in
    onnx_import)        corpus=onnx        dict=onnx.dict        max_len=131072 timeout=10 runs=3000 ;;
    onnx_plan)          corpus=onnx        dict=onnx.dict        max_len=131072 timeout=30 runs=300 ;;
    plan_load)          corpus=plan        dict=plan.dict        max_len=131072 timeout=10 runs=3000 ;;
    checkpoint_meta)    corpus=checkpoint  dict=plan.dict        max_len=8192   timeout=10 runs=10000 ;;
    token_header)       corpus=tokens      dict=tokens.dict      max_len=4096   timeout=10 runs=10000 ;;
    safetensors_header) corpus=safetensors dict=safetensors.dict max_len=16384  timeout=10 runs=20000 ;;
    ir_parse)           corpus=ir          dict=ir.dict          max_len=16384  timeout=10 runs=50000 ;;
    stream_schedule)    corpus=schedule    dict=plan.dict        max_len=16384  timeout=20 runs=400 ;;
    *) echo "run.sh: unknown target '$1'" >&2; exit 2 ;;
  esac
  # An allocation bug must show as a finding, not stall the machine (24 GiB):
  # any single malloc past 2 GiB, or an RSS past 2 GiB, is reported with its stack.
  flags=(-max_len="$max_len" -timeout="$timeout" -rss_limit_mb=2048 -malloc_limit_mb=2048
         -dict="$HERE/dict/$dict" -print_final_stats=1)
}

# Sanitizer reports abort with a stack (UBSan is built with -fno-sanitize-recover).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export MEGAC_THREADS="${MEGAC_THREADS:-1}"

mode="$1"; shift
if [ "$mode" = flags ]; then
  target_flags "$1"
  echo "${flags[*]} $HERE/corpus/$corpus"
  exit 0
fi
fuzzer="$1" target="$2" work="$3"; shift 3
target_flags "$target"
mkdir -p "$work"

case "$mode" in
ci)
  # 1. The regressions, once each, except the known failures.
  known=$(grep -v '^\s*#' "$HERE/known_failures.txt" 2>/dev/null | awk 'NF {print $1}' || true)
  inputs=()
  if [ -d "$HERE/regressions/$target" ]; then
    for f in "$HERE/regressions/$target"/*; do
      [ -f "$f" ] || continue
      rel="$target/$(basename "$f")"
      if grep -qxF "$rel" <<<"$known"; then
        why=$(grep -F "$rel" "$HERE/known_failures.txt" | head -1 | sed 's/^[^#]*#\s*//')
        echo "KNOWN FAILURE, skipped (test/fuzz/known_failures.txt): regressions/$rel: $why"
        continue
      fi
      inputs+=("$f")
    done
  fi
  if [ ${#inputs[@]} -gt 0 ]; then
    echo "fuzz-$target: ${#inputs[@]} regression inputs"
    "$fuzzer" "${flags[@]}" "${inputs[@]}"
  else
    echo "fuzz-$target: no regression inputs to run"
  fi
  # 2. The seeds, then fuzzing from them: deterministic for a given build.
  rm -rf "$work/corpus-$target" && mkdir -p "$work/corpus-$target"
  if grep -qxF "$target:fuzzing" <<<"$known"; then
    why=$(grep -F "$target:fuzzing" "$HERE/known_failures.txt" | head -1 | sed 's/^[^#]*#\s*//')
    echo "KNOWN FAILURE, mutation phase skipped (test/fuzz/known_failures.txt): $target: $why"
    echo "fuzz-$target: the seeds only"
    "$fuzzer" "${flags[@]}" -runs=0 "$HERE/corpus/$corpus"
    exit 0
  fi
  echo "fuzz-$target: seeds and $runs runs at -seed=1"
  if ! "$fuzzer" "${flags[@]}" -seed=1 -runs="$runs" -artifact_prefix="$work/$target-" \
      "$work/corpus-$target" "$HERE/corpus/$corpus"; then
    echo "fuzz-$target: FINDING: the input is $work/$target-*; minimize it with" >&2
    echo "  $fuzzer ${flags[*]} -minimize_crash=1 -runs=10000 -exact_artifact_path=OUT INPUT" >&2
    echo "and commit it under test/fuzz/regressions/$target/ (README.md)" >&2
    exit 1
  fi
  ;;
fuzz)
  mkdir -p "$work/corpus-$target"
  exec "$fuzzer" "${flags[@]}" -artifact_prefix="$work/$target-" "$@" "$work/corpus-$target" "$HERE/corpus/$corpus"
  ;;
*) echo "run.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
