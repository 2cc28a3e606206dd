# The one entry point: `make test` installs what is missing, builds, and runs every test.
PYTHON ?= python3
JOBS ?= $(shell nproc)
CPP_BUILD := build/cpp
ASAN_BUILD := build/cpp-asan
TSAN_BUILD := build/cpp-tsan

.PHONY: test deps install wheel cpp-test cpp-test-asan cpp-test-tsan py-test fuzz fuzz-long clean

test: deps cpp-test cpp-test-asan cpp-test-tsan install fuzz wheel py-test

deps:
	PYTHON=$(PYTHON) ./scripts/install_deps.sh

# The Python package, built by scikit-build-core against the same CMake project.
install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-build-isolation .

# A wheel users can install anywhere: the extension with libcurl, OpenSSL, pugixml and what they
# need copied in (auditwheel repair), as dist/s3stream-*-manylinux_*.whl. tests/python/test_wheel.py
# installs it into a clean venv with the system's copies of those libraries hidden.
wheel:
	rm -rf dist
	$(PYTHON) -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps -w dist/raw .
	$(PYTHON) -m auditwheel repair --wheel-dir dist dist/raw/s3stream-*.whl
	rm -rf dist/raw

cpp-test:
	cmake -S . -B $(CPP_BUILD) -G Ninja -DS3STREAM_BUILD_TESTS=ON -DPython_EXECUTABLE=$$(command -v $(PYTHON))
	cmake --build $(CPP_BUILD) -j $(JOBS)
	ctest --test-dir $(CPP_BUILD) --output-on-failure -j $(JOBS)

# The same unit tests under AddressSanitizer and UndefinedBehaviorSanitizer.
cpp-test-asan:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DS3STREAM_BUILD_TESTS=ON -DS3STREAM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

# The same tests, the moto ones included, under ThreadSanitizer. The test environment (set by
# tests/cpp/CMakeLists.txt) gives TSAN_OPTIONS with tests/cpp/tsan.supp and halt_on_error=1.
# Left out here: the two tests that assert how the read-ahead window reacts to timing, which
# TSan's 5-15x slowdown makes meaningless (they run in the other two builds).
TSAN_TIMING_TESTS := ReadAheadGrowsWhileTheConsumerWaitsForTheNetwork|ReadAheadWindowGrowsOnlyWhenTheConsumerWaits
cpp-test-tsan:
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DS3STREAM_BUILD_TESTS=ON -DS3STREAM_TSAN=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) -E '$(TSAN_TIMING_TESTS)'


# S3STREAM_REQUIRE_WHEEL: the wheel test fails, instead of skipping, when `make wheel` made none.
py-test:
	cd tests/python && S3STREAM_REQUIRE_WHEEL=1 $(PYTHON) -m pytest -q

# The fuzz targets (tests/fuzz: libFuzzer under clang with ASan + UBSan, atheris for Python), each
# seeded from tests/fuzz/corpus/<target>; findings in build/fuzz/artifacts/. `make fuzz` is a short
# run of every target, cheap enough for `make test`; `make fuzz-long FUZZ_SECONDS=600` runs each for
# that long, FUZZ_JOBS at a time. After `install`: the Python targets need the installed _core.
FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 2

fuzz:
	PYTHON=$(PYTHON) JOBS=$(JOBS) FUZZ_JOBS=1 ./tests/fuzz/run_fuzzers.sh 10 3000

fuzz-long:
	PYTHON=$(PYTHON) JOBS=$(JOBS) FUZZ_JOBS=$(FUZZ_JOBS) ./tests/fuzz/run_fuzzers.sh $(FUZZ_SECONDS)

clean:
	rm -rf build dist

# The soak (tests/python/test_soak.py, ~20 min): 100k samples an epoch through a MapDataset and a
# ShardDataset for 20 epochs under injected faults; nothing lost or repeated, pace and memory held.
# Sizes: S3STREAM_SOAK_SAMPLES, S3STREAM_SOAK_EPOCHS; figures as JSON: S3STREAM_SOAK_REPORT=prefix.
.PHONY: soak
soak: deps install
	cd tests/python && $(PYTHON) -m pytest -q -s --soak test_soak.py

# The demo (examples/demo.py): installs what it needs, builds and installs the package, then trains a
# small CNN for one epoch from a local S3 stand-in (nginx), with s3stream and with plain boto3, and
# prints samples/s and the share of step time spent waiting for data side by side.
# Options: make demo DEMO_ARGS="--images 8000" (python examples/demo.py --help).
DEMO_ARGS ?=

.PHONY: demo demo-deps

demo: deps demo-deps install
	$(PYTHON) examples/demo.py $(DEMO_ARGS)

demo-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r requirements-demo.txt

# The peer comparison (bench/): s3stream, s3torchconnector, boto3, webdataset, mosaicml-streaming
# and litdata against a local S3 stand-in with S3's latency; table, JSON and plot in bench/results/.
# Options: make bench BENCH_ARGS="--quick" (python -m bench --help; bench/README.md).
BENCH_ARGS ?=

.PHONY: bench bench-deps

bench: deps bench-deps install
	$(PYTHON) -m bench $(BENCH_ARGS)

# litdata and mosaicml-streaming pull in a torchvision built for another torch, whose broken import
# then fails Lightning and torchmetrics (the tests): it goes again (the bench stubs what mosaic needs).
bench-deps:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r bench/requirements.txt
	$(PYTHON) -c "import torchvision" 2>/dev/null || $(PYTHON) -m pip uninstall --quiet --yes torchvision

# The listing benchmark (bench/listing.py): s3stream's parallel and sequential listings and boto3's
# paginator over 1 M keys per layout of a synthetic key space the stand-in serves with 20 ms per
# LIST; a table and JSON (docs/benchmarks.md, "Listing"). Options: make bench-list
# BENCH_LIST_ARGS="--keys 100000 --runs 1" (python -m bench.listing --help). Not part of make test.
BENCH_LIST_ARGS ?= --out bench/results/listing.json

.PHONY: bench-list
bench-list: deps bench-deps install
	mkdir -p bench/results
	$(PYTHON) -m bench.listing $(BENCH_LIST_ARGS)
