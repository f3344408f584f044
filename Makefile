# Makefile — the front door: `make test`, `make run`, `make bench`, `make fuzz`, `make install` (CMake and CTest underneath).
BUILD ?= build
MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
DEPS := cmake make gcc libc6-dev libgomp1 pkg-config libjansson-dev python3 python3-venv libopenmpi-dev openmpi-bin
# make fuzz: clang with libFuzzer and the sanitizer runtimes, clang's OpenMP, llvm-symbolizer.
FUZZ_DEPS := clang libclang-rt-dev libomp-dev llvm
FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
# make fuzz-long: a campaign for a quiet machine, its corpus kept between runs.
FUZZ_LONG_SECONDS ?= 3600
FUZZ_CORPUS ?= $(HOME)/.cache/libmoe/fuzz-corpus

.PHONY: all deps configure build test test-pip install run bench bench-kernels fuzz fuzz-long clean

all: build

deps:
	@scripts/ensure-deps.sh $(DEPS)

configure: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The whole suite; tests named *kernel* also run under MOE_ISA=scalar, avx2 and avx512. The
# Python tests run in the venv scripts/ensure-venv.sh makes once (MOE_VENV, default .venv).
# `pip install .` compiles the library again (3-4 minutes on two cores): make test-pip.
test: build
	@scripts/ensure-venv.sh
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE pip

test-pip: build
	@scripts/ensure-venv.sh
	@cd $(BUILD) && ctest --output-on-failure -L pip

# The header, libmoe.a, libmoe.so, the moe tool, the CMake package and libmoe.pc, under PREFIX
# (DESTDIR=... stages them).
install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# demo.sh builds quietly (into $(BUILD)/demo/build.log), so the first screen is the result.
run: configure
	@scripts/demo.sh $(BUILD)

bench: build
	@scripts/bench.sh $(BUILD)

bench-kernels: build
	@scripts/bench.sh $(BUILD) kernels

# Each libFuzzer target for FUZZ_SECONDS (ASan + UBSan, clang; jansson compiled in from its
# pinned source package, FUZZ_JANSSON=system for the system library) from its in-tree corpus;
# FUZZ_TARGETS="safetensors npy" runs only those. Findings land in $(FUZZ_BUILD)/fuzz-artifacts/.
fuzz: deps
	@scripts/ensure-deps.sh $(FUZZ_DEPS)
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The same for FUZZ_LONG_SECONDS per target (an hour), growing the corpus in FUZZ_CORPUS
# (outside the build folder, kept from one campaign to the next). Run it alone on the machine.
fuzz-long: deps
	@scripts/ensure-deps.sh $(FUZZ_DEPS)
	@mkdir -p $(FUZZ_CORPUS)
	@FUZZ_CORPUS=$(FUZZ_CORPUS) scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_LONG_SECONDS) $(FUZZ_TARGETS)

clean:
	rm -rf $(BUILD)
