# SPDX-License-Identifier: Apache-2.0
# The commands the README documents. `make demo` and `make test` install what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# Warnings are errors in CI (CI=true) and in `make build WERROR=ON`.
WERROR ?= $(if $(CI),ON,OFF)
CUDA ?= ON

.PHONY: all deps build test test-cpp test-python demo bench clean

all: build

deps:
	@bash scripts/install_deps.sh

$(BUILD_DIR)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DDI_WERROR=$(WERROR) -DDI_ENABLE_CUDA=$(CUDA)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps build
	$(MAKE) --no-print-directory test-cpp test-python

test-cpp:
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

test-python:
	DEEPINFER_BIN=$(CURDIR)/$(BUILD_DIR)/deepinfer .venv/bin/python -m pytest -q tests/python

demo: deps build
	@bash examples/demo.sh $(BUILD_DIR)/deepinfer

bench: build
	@bash bench/run_cpu.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
