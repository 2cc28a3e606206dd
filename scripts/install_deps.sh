#!/usr/bin/env bash
# Installs what building and testing s3stream needs on a fresh Debian/Ubuntu machine:
# system libraries from apt, Python tools and test dependencies from PyPI. Idempotent.
set -euo pipefail

APT_PACKAGES=(
  g++ cmake ninja-build pkg-config
  libcurl4-openssl-dev libssl-dev libpugixml-dev libgtest-dev zlib1g-dev
  nlohmann-json3-dev           # header-only JSON: the answers of credential sources (src/auth)
  nginx libnginx-mod-http-lua  # the local S3 stand-in of the benchmarks and `make demo` (time to first byte)
  wrk curl                     # the benchmark's ceiling, and webdataset's pipe:curl shards
  openssl                      # certificates for the TLS tests (tests/python/test_hostile.py)
  clang libclang-rt-14-dev     # the libFuzzer targets of `make fuzz` (tests/fuzz): clang and its fuzzer runtime
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

PYTHON="${PYTHON:-python3}"
# torch is pinned in tests/requirements.txt: an unpinned torch would pull a multi-GB CUDA build.
"$PYTHON" -m pip install --quiet --disable-pip-version-check \
  "scikit-build-core>=0.10" "nanobind>=2.0" -r tests/requirements.txt
