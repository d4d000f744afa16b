# Kestrel: the two commands of the README, and the GPU check.
#   make demo   build, then run the main job (today: `kestrel selfcheck`) on every available backend
#   make test   build, check that every mutation patch still applies, then run the test suite
#               (CPU tests; GPU tests are skipped by name without a GPU)
# Both first install what is missing from Debian packages (scripts/install-deps).

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build demo test gpu-check clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/kestrel selfcheck

test: build
	@scripts/mutation-check --check-apply
	$(BUILD)/kestrel-tests

gpu-check:
	scripts/gpu-check

clean:
	rm -rf $(BUILD)
