# Every target installs what it needs into .venv first (torch 2.13.0 where none is
# installed, pinned: the CPU wheel where pip's find-links offer one, as on CI; PyPI's
# Linux wheel is the CUDA build).
# On a machine whose python already has the dependencies (the GPU box), use
#   make SYSTEM=1 <target>        (runs python3 directly, installs nothing)
PYTHON ?= python3
VENV   ?= .venv
ifeq ($(SYSTEM),1)
  PY      := $(PYTHON)
  INSTALL :=
  export PYTHONPATH := $(CURDIR):$(PYTHONPATH)
else
  PY      := $(VENV)/bin/python
  INSTALL := $(VENV)/.installed
endif

ARCH ?=
ARCH_FLAGS := $(foreach a,$(ARCH),--arch $(a))
# WITH_EMULATED=1: also build kernels whose MMA is emulated on an arch (for Gemm(allow_emulated=True))
WITH_EMULATED ?=
ifeq ($(WITH_EMULATED),1)
  ARCH_FLAGS += --with-emulated
endif

.PHONY: install generate build test test-gpu bench list clean

install: $(INSTALL)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -c "import torch" 2>/dev/null || $(VENV)/bin/python -m pip install -q torch==2.13.0
	$(VENV)/bin/python -m pip install -q -e ".[test,volta]"
	touch $@

generate: $(INSTALL)
	$(PY) -m codegen --out generated

build: $(INSTALL)
	$(PY) -m gemm_runtime.build $(ARCH_FLAGS)

test: $(INSTALL)
	$(PY) -m pytest -q

test-gpu: $(INSTALL)
	$(PY) -m pytest -q -m gpu

bench: $(INSTALL)
	$(PY) -m bench.dense

list: $(INSTALL)
	$(PY) -m gemm_runtime list

clean:
	rm -rf build generated/*/ generated/manifest.json
