# The README's two commands: `make demo` and `make test`.
# Everything installs into .venv; nothing but Python 3.11, pip and make is assumed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# 2 workers for the 2-core machine; override with `make test PYTEST_ARGS=...`
PYTEST_ARGS ?= -n 2 --dist worksteal

.PHONY: demo drop-in test test-slow test-all bench bench-all gpu-check clean clean-kernels

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[bench,examples]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

## demo: install into .venv and run the main job (quick benchmark + training example)
demo: $(VENV)/.installed-demo
	$(BIN)/python -m logsoftmax bench --quick
	$(BIN)/python examples/train_digits.py --quick

## drop-in: the PyTorch and JAX drop-in examples (same curves as torch / jax.nn; plots in docs/img)
drop-in: $(VENV)/.installed-demo
	$(BIN)/python examples/torch_drop_in.py
	$(BIN)/python examples/jax_drop_in.py

## test: install the test extra and run the suite (slow cases excluded; the two workers
## first compile the kernels most tests share, each kernel once: tests/warm_kernels.py)
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow" --warm-kernels $(PYTEST_ARGS)

## test-slow: only the cases marked slow
test-slow: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

test-all: test test-slow

## bench: the CPU benchmark (~10 min on a quiet 2-core machine): prints its table and
## rewrites this CPU's section of docs/performance.md and its plot; BENCH_ARGS=--quick for
## a one-minute subset that only prints
BENCH_ARGS ?=
bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_cpu.py $(BENCH_ARGS)

## bench-all: every benchmark script (CPU, shapes beside the set, accuracy against PyTorch, autograd, adapters, graph, dask); slow
bench-all: bench
	$(BIN)/python benchmarks/every_size.py
	$(BIN)/python benchmarks/accuracy_vs_torch.py
	$(BIN)/python benchmarks/accuracy_vs_torch.py --long --dtypes f32 --ops log_softmax,softmax
	$(BIN)/python benchmarks/few_rows_cache.py
	$(BIN)/python benchmarks/scratch_contents.py
	$(BIN)/python benchmarks/bench_autograd.py
	$(BIN)/python benchmarks/bench_adapters.py
	$(BIN)/python benchmarks/bench_graph.py
	$(BIN)/python benchmarks/bench_dask.py

## gpu-check: on a machine with an NVIDIA GPU, the CUDA tests and benchmark (results under $$OUT)
# With no .venv and a $(PYTHON) that already has torch and triton (a GPU
# image without a package registry, like the H200's), that Python runs the
# package from src/; otherwise the test extras are installed into .venv.
gpu-check:
	@if [ ! -x $(BIN)/python ] && $(PYTHON) -c "import torch, triton" 2>/dev/null; then \
	  OUT=$${OUT:-gpu-results} PYTHON=$(PYTHON) bash benchmarks/gpu_check.sh; \
	else \
	  $(MAKE) $(VENV)/.installed-test && \
	  OUT=$${OUT:-gpu-results} PYTHON=$(BIN)/python bash benchmarks/gpu_check.sh; \
	fi

# numba keys a cached kernel on its own file's stamp only: after editing a
# helper that kernels elsewhere inline (_vec.py, _math.py, _simd.py), clear it
clean-kernels:
	find src benchmarks -name '*.nb[ic]' -delete

clean: clean-kernels
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
