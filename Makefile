# devmm — a thin wrapper over Meson. `make run` and `make test` work on a fresh Debian 12 with
# nothing done before them: every target first installs what it is missing — `make run` only the
# build's dependencies (make deps-build), the test targets everything (make deps).
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = fuzz_config fuzz_values fuzz_layout fuzz_log fuzz_ipc_tensor fuzz_ipc_handle
# fixed: tests/mutation/mutate.py works there
MUTATE_BUILD = build-mutate
MUTATE_SAMPLE ?= 20
MUTATE_SEED ?= 2026
MUTATE_MINUTES ?= 25
MESON ?= meson
NINJA ?= ninja
C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cpp' '*.hpp' 2>/dev/null)
PY_SOURCES = $(shell git ls-files '*.py' 2>/dev/null)

.PHONY: all deps deps-build build test-build test lint fmt verify bench run asan tsan valgrind python-asan fuzz \
  wheel wheel-smoke mutate mutate-ci clean

all: build

deps:
	@./tools/deps.sh test

deps-build:
	@./tools/deps.sh build

# Optional parts whose dependency is missing (tests without Check, Python tests without .venv,
# the RMM bridge) configure as off, saying why in the summary; `make test` asks for all of them.
$(BUILD)/build.ninja: | deps-build
	$(MESON) setup $(BUILD)

build: deps-build $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

# the build with every test suite (a missing test dependency is an error here)
test-build: deps $(BUILD)/build.ninja
	$(MESON) configure $(BUILD) -Dtests=enabled -Dpython_tests=enabled
	$(NINJA) -C $(BUILD)

test: test-build
	$(MESON) test -C $(BUILD) --print-errorlogs

# The main job: build devmm and show what it sees, with a round trip on every device.
run: build
	$(MESON) devenv -C $(BUILD) devmm-info --check --config $(CURDIR)/$(BUILD)/conf/devmm.ini

bench: test-build
	$(MESON) test -C $(BUILD) --benchmark --verbose

lint: deps
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --inline-suppr --std=c11 -I include -I $(BUILD)/include -D__GNUC__ \
	  --suppress=missingIncludeSystem $(filter %.c,$(C_SOURCES))
	clang-format --dry-run --Werror $(C_SOURCES)
	@if [ -n "$(PY_SOURCES)" ]; then /usr/bin/python3 -m pyflakes $(PY_SOURCES); fi
	shellcheck tools/*.sh tests/*.sh tests/gpu/*.sh .ci/run

fmt: deps
	clang-format -i $(C_SOURCES)

# The C suites again under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@[ -f $(ASAN_BUILD)/build.ninja ] || $(MESON) setup $(ASAN_BUILD) \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
	$(NINJA) -C $(ASAN_BUILD)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
	  $(MESON) test -C $(ASAN_BUILD) --print-errorlogs --suite core

# The multi-threaded suites under ThreadSanitizer.
tsan: deps
	@[ -f $(TSAN_BUILD)/build.ninja ] || $(MESON) setup $(TSAN_BUILD) \
	  -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized -Dpython_tests=disabled
	$(NINJA) -C $(TSAN_BUILD)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1 \
	  $(MESON) test -C $(TSAN_BUILD) --print-errorlogs stress thread_safe statistics registry \
	  aligned sim_runtime sim_gpu sim_core interchange sim_capture sim_ipc sim_fork buffer

# The C suites under valgrind memcheck (no fork, so valgrind sees each test's process).
valgrind: test-build
	VALGRIND="valgrind --quiet --fair-sched=yes --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
	  --suppressions=$(CURDIR)/tests/valgrind.supp" ./tests/run-valgrind.sh $(BUILD)

# The Python lifetime and stress tests over an ASan build of libdevmm (LD_PRELOAD runtime).
python-asan: asan
	./tests/run-python-asan.sh $(ASAN_BUILD)

# Each libFuzzer target for FUZZ_SECONDS from the seed corpus in tests/fuzz/corpus.
fuzz: deps
	@[ -f $(FUZZ_BUILD)/build.ninja ] || CC=clang $(MESON) setup $(FUZZ_BUILD) -Dfuzz=true \
	  -Db_sanitize=address,undefined -Db_lundef=false -Dtests=disabled -Dcuda=disabled -Drocm=disabled
	$(NINJA) -C $(FUZZ_BUILD)
	./tests/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Mutation testing (tests/mutation/): a seeded sample of mutants of each file in
# tests/mutation/targets.txt against that file's fast tests, in a scratch tree ($(MUTATE_BUILD)/);
# scores per file, survivors listed. `mutate` is the measurement (targets: 90% of the C core's
# mutants killed, 85% of the Python package's); `mutate-ci` is CI's small fixed sample, which
# fails when the score falls below its floor.
mutate: deps
	.venv/bin/python tests/mutation/mutate.py --sample $(MUTATE_SAMPLE) --seed $(MUTATE_SEED) \
	  --minutes $(MUTATE_MINUTES) --target-c 90 --target-py 85

mutate-ci: deps
	.venv/bin/python tests/mutation/mutate.py --sample 2 --seed 2026 --minutes 15 \
	  --target-c 70 --target-py 65 --report $(MUTATE_BUILD)/report-ci.md

verify: lint test asan tsan valgrind python-asan fuzz mutate-ci

# A portable wheel in dist/ from the *committed* tree (the sdist is `meson dist`, a git archive):
# the sdist and a wheel built from it (pip's path: meson-python) for the floor glibc 2.28
# (tools/wheel-build.sh: Zig's C compiler against glibc 2.28, libltdl rebuilt from Debian's
# source with it; ADR 43), retagged py3-none (ctypes only: no CPython ABI) and repaired by
# auditwheel as manylinux_2_28 (that libltdl and Debian's libinih vendored), then checked: the
# native parts, the license texts, a notice for each vendored library, the tag and every ELF's
# glibc symbol versions (tools/wheel_checks.py --wheel). Tools: .venv-wheel (tools/deps.sh wheel).
WHEEL_VENV = .venv-wheel
wheel:
	@./tools/deps.sh wheel
	rm -rf dist
	./tools/wheel-build.sh dist/raw
	$(WHEEL_VENV)/bin/python -m wheel tags --remove --python-tag py3 --abi-tag none dist/raw/*.whl
	LD_LIBRARY_PATH="$(CURDIR)/build-wheel/ltdl/prefix/lib" PATH="$(CURDIR)/$(WHEEL_VENV)/bin:$$PATH" \
	  $(WHEEL_VENV)/bin/auditwheel repair --plat manylinux_2_28_x86_64 -w dist dist/raw/*.whl
	mv dist/raw/*.tar.gz dist/
	rm -rf dist/raw
	$(WHEEL_VENV)/bin/python tools/wheel_checks.py --wheel dist/devmm-*.whl
	@ls -l dist

# The wheel on a brand-new Debian 12 and Debian 11 (Python 3.9) with only python3 + python3-venv
# (root; see the script; WHEEL_SMOKE_SUITES=bookworm or bullseye for one).
wheel-smoke: wheel
	./tools/wheel-smoke.sh dist

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) $(MUTATE_BUILD) dist build-wheel
