# SPDX-License-Identifier: Apache-2.0
# The commands the README documents. `make demo` and `make test` install what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# Warnings are errors in CI (CI=true) and in `make build WERROR=ON`.
WERROR ?= $(if $(CI),ON,OFF)
CUDA ?= ON

.PHONY: all deps build python test test-cpp test-python demo bench clean

# The Python extension is configured with the project virtualenv's interpreter (nanobind is there).
VENV_PY := $(CURDIR)/.venv/bin/python
PY_CMAKE_ARGS = $(shell test -x .venv/bin/python && echo -DPython_EXECUTABLE=$(VENV_PY))

all: build

deps:
	@bash scripts/install_deps.sh

$(BUILD_DIR)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DDI_WERROR=$(WERROR) -DDI_ENABLE_CUDA=$(CUDA) $(PY_CMAKE_ARGS)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Installs the package into .venv from this checkout, reusing $(BUILD_DIR): scikit-build-core
# reconfigures the same tree (its other options stay as `make build` cached them; tests and
# benchmarks stay on) and builds only the extension's targets, already up to date after
# `make build`: no second compile of the C++ project.
python: build
	CMAKE_GENERATOR=Ninja $(VENV_PY) -m pip install -q --no-build-isolation --no-deps \
	  -Cbuild-dir=$(BUILD_DIR) -Ccmake.define.DI_BUILD_TESTS=ON -Ccmake.define.DI_BUILD_BENCH=ON .

test: deps build
	$(MAKE) --no-print-directory python test-cpp test-python

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
