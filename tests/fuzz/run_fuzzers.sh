#!/usr/bin/env bash
# Builds every fuzz target and runs each for a while: `make fuzz` (short runs, part of `make test`)
# and `make fuzz-long FUZZ_SECONDS=600`.
#   run_fuzzers.sh SECONDS [PY_RUNS]
# C++ targets (tests/fuzz/*_fuzz.cc; clang, ASan + UBSan, in build/fuzz) run SECONDS each, seeded
# from tests/fuzz/corpus/<target> (tar_fuzz through run_tar_fuzz.sh, which makes its own seeds);
# Python targets (tests/fuzz/python/*_fuzz.py, atheris) run PY_RUNS inputs each, or SECONDS without it.
# FUZZ_JOBS targets run at a time (default 1); FUZZ_TARGETS="a_fuzz b_fuzz" picks some.
# Each target's output is in build/fuzz/logs/<target>.log, its final figures are printed here; what
# a run finds lands in build/fuzz/artifacts/, the grown corpora in build/fuzz/corpus/<target> (the
# checked-in seeds are only read). Exits non-zero when any target finds something.
set -euo pipefail
seconds="${1:-60}"
py_runs="${2:-}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build/fuzz"
CXX="${CXX:-clang++}"
PYTHON="${PYTHON:-python3}"
jobs="${FUZZ_JOBS:-1}"
command -v "$CXX" >/dev/null || { echo "run_fuzzers.sh needs clang: apt-get install -y clang libclang-rt-14-dev" >&2; exit 1; }

all_cpp=$(cd "$root/tests/fuzz" && ls *_fuzz.cc | sed 's/\.cc$//')
all_py=$(cd "$root/tests/fuzz/python" && ls *_fuzz.py | sed 's/\.py$//')
targets="${FUZZ_TARGETS:-$all_cpp $all_py}"
cpp_targets=$(for t in $targets; do [ -f "$root/tests/fuzz/$t.cc" ] && echo "$t"; done || true)

if [ -n "$cpp_targets" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DS3STREAM_BUILD_FUZZERS=ON -DS3STREAM_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j "${JOBS:-2}" --target $cpp_targets
fi
mkdir -p "$build/logs" "$build/artifacts"

run_one() {  # run_one TARGET: exit status 0 when nothing was found
  local t="$1" log="$build/logs/$1.log"
  local common=(-timeout=30 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-")
  mkdir -p "$build/corpus/$t"
  if [ "$t" = tar_fuzz ]; then
    "$root/tests/fuzz/run_tar_fuzz.sh" "$seconds" >"$log" 2>&1
  elif [ -f "$root/tests/fuzz/$t.cc" ]; then
    "$build/$t" -max_total_time="$seconds" "${common[@]}" "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
  else
    local limit=(-max_total_time="$seconds")
    [ -n "$py_runs" ] && limit=(-runs="$py_runs")
    (cd "$root/tests/fuzz/python" &&
      "$PYTHON" "$t.py" "${limit[@]}" "${common[@]}" "$build/corpus/$t" "$root/tests/fuzz/corpus/$t") >"$log" 2>&1
  fi
}

report() {  # report TARGET STATUS: libFuzzer's final figures, or the end of the log on a finding
  local t="$1" log="$build/logs/$1.log"
  local runs cov
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|INITED|NEW|REDUCE)' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
  if [ "$2" -eq 0 ]; then
    printf '%-14s ok     runs: %-9s %s\n' "$t" "${runs:-?}" "${cov:-}"
  else
    printf '%-14s FAILED (exit %s): see %s and build/fuzz/artifacts/\n' "$t" "$2" "$log"
    tail -n 40 "$log" | sed 's/^/    /'
  fi
}

failed=0
running=()
finish_oldest() {
  local t="${running[0]%%:*}" pid="${running[0]#*:}" status=0
  wait "$pid" || status=$?
  report "$t" "$status"
  [ "$status" -eq 0 ] || failed=1
  running=("${running[@]:1}")
}
for t in $targets; do
  run_one "$t" &
  running+=("$t:$!")
  if [ "${#running[@]}" -ge "$jobs" ]; then finish_oldest; fi
done
while [ "${#running[@]}" -gt 0 ]; do finish_oldest; done
exit "$failed"
