#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/tar_fuzz.cc (clang, ASan + UBSan) in build/fuzz and runs it
# for [seconds] (default 60), seeded with the WebDataset test shards, tests/cpp/golden/tricky.tar and
# small archives GNU tar makes here in every format. Crashes land in build/fuzz/artifacts/.
# Needs: apt-get install -y clang libclang-rt-14-dev (or the clang version apt offers).
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build/fuzz"
testdata="${S3STREAM_TESTDATA_DIR:-$root/tests/data}/webdataset"
CXX="${CXX:-clang++}"
command -v "$CXX" >/dev/null || { echo "run_tar_fuzz.sh needs clang: apt-get install -y clang libclang-rt-14-dev" >&2; exit 1; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DS3STREAM_BUILD_FUZZERS=ON -DS3STREAM_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target tar_fuzz

corpus="$build/corpus/tar_fuzz"
seeds="$build/seeds"
mkdir -p "$corpus" "$build/artifacts"
rm -rf "$seeds" && mkdir -p "$seeds/src/d"
# A seed is 2 control bytes (flags: bit 0 = gzip; chunk size selector) and at most 16 KiB of archive.
seed() {  # seed NAME FLAGS FILE
  { printf "\\x$2\\x17"; head -c 16382 "$3"; } > "$corpus/$1"
}
for f in "$testdata"/*.tar "$root/tests/cpp/golden/tricky.tar"; do
  [ -f "$f" ] && seed "$(basename "$f")" 00 "$f"
done
for f in "$testdata"/*.tgz; do
  [ -f "$f" ] && seed "$(basename "$f")" 01 "$f"
done
(
  cd "$seeds/src"
  printf 'hello' > a.txt
  printf 'x%.0s' {1..700} > "d/$(printf 'l%.0s' {1..120}).jpg"
  printf 'u' > "d/ünï.cls"
  ln -sf a.txt link.txt
  for format in v7 ustar gnu pax; do
    names=(a.txt link.txt d)
    [ "$format" = v7 ] || [ "$format" = ustar ] && names=(a.txt link.txt "d/ünï.cls")
    tar --format="$format" -cf "../$format.tar" "${names[@]}" 2>/dev/null || true
    seed "gnutar-$format.tar" 00 "../$format.tar"
    gzip -c "../$format.tar" > "../$format.tgz" && seed "gnutar-$format.tgz" 01 "../$format.tgz"
  done
)
cat > "$build/tar.dict" <<'DICT'
"ustar\x00"
"ustar  \x00"
"00"
"././@LongLink"
"././@PaxHeader"
" path="
" size="
" linkpath="
" GNU.sparse.major="
"__key__"
"__bad__"
"\x1f\x8b\x08\x00"
DICT

exec "$build/tar_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -dict="$build/tar.dict" -artifact_prefix="$build/artifacts/" -print_final_stats=1 "$corpus"
