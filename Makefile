# devmm — a thin wrapper over Meson. `make test` works on a fresh Debian 12 with nothing done
# before it: every target first installs what is missing (make deps).
BUILD ?= build
ASAN_BUILD ?= build-asan
MESON ?= meson
NINJA ?= ninja
C_SOURCES = $(shell git ls-files '*.c' '*.h' '*.cpp' '*.hpp' 2>/dev/null)
PY_SOURCES = $(shell git ls-files '*.py' 2>/dev/null)

.PHONY: all deps build test lint fmt verify bench run asan clean

all: build

deps:
	@./tools/deps.sh

$(BUILD)/build.ninja: | deps
	$(MESON) setup $(BUILD)

build: deps $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

test: build
	$(MESON) test -C $(BUILD) --print-errorlogs

# The main job: build devmm and show what it sees, with a round trip on every device.
run: build
	$(MESON) devenv -C $(BUILD) devmm-info --check --config $(CURDIR)/$(BUILD)/conf/devmm.ini

bench: build
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
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
	  $(MESON) test -C $(ASAN_BUILD) --print-errorlogs --suite core

verify: lint test asan

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
