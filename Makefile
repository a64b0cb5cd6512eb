# The two-command promise: `make run` and `make test` set up .venv on first use.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# PyPI's torch on Linux is the CUDA build (about 5.5 GB); on a CPU-only machine where PyTorch's CPU index is
# reachable: make TORCH_INDEX=https://download.pytorch.org/whl/cpu run (the same version, CPU-only wheels)
TORCH_INDEX ?=
TORCH_FROM := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)

.PHONY: run test test-slow bench gpu-check gpu-bench gpu-audit gpu-wheels gpu-sandbox lint format clean slurm

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_FROM) torch==2.14.1 torchvision==0.29.1 || $(BIN)/pip install -q $(TORCH_FROM) "torch<2.15" "torchvision<0.30"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

slurm: $(STAMP)  # Hydra's submitit launcher: hydra/launcher=slurm (a cluster) or submitit_local
	$(BIN)/pip install -q -e ".[slurm]"

run: $(STAMP)
	$(BIN)/decpriv run $(ARGS)

test: $(STAMP) lint
	$(BIN)/pytest -n 2 -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# On a GPU machine (no .venv needed: its python3 with decpriv's wheels, ../shared/gpu/README.md): cpu vs
# cuda tables of every protocol, attack family, audit and accountant, each row as its command finishes,
# each held to its criterion (python3 -m benchmarks.gpu_check --dry lists them); then where the GPU pays.
# Here, with the network: make gpu-wheels; there: bash .whl/install.sh && make gpu-check gpu-bench
GPU_PY ?= python3
# torch before 2.12 names its compile cache after the user and fails where the uid has no entry in
# /etc/passwd (a container's root on the GPU machine): a cache folder given by name needs none
GPU_ENV = PYTHONPATH=$(CURDIR) TORCHINDUCTOR_CACHE_DIR=$${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor-decpriv}
gpu-check:
	$(GPU_ENV) $(GPU_PY) -u -m benchmarks.gpu_check $(ARGS)

gpu-bench:
	$(GPU_ENV) $(GPU_PY) -u -m benchmarks.bench_gpu

# On a GPU machine: the DP-SGD audit preset at 10^7 trials on CUDA with sigma 0.75, its bound against the
# sigma-1 claim, and the trials the CPU's cores draw in the same time
gpu-audit:
	$(GPU_ENV) $(GPU_PY) -u -m benchmarks.audit_underreport --device cuda --trials 10000000 --chunk 500000

# the shared script also ignores .whl in .git/info/exclude, which a git worktree (.git a file) lacks: it
# runs in a scratch folder, and .gitignore ignores .whl
gpu-wheels:
	rm -rf .whl/stage && mkdir -p .whl/stage/.git/info
	cd .whl/stage && bash $(CURDIR)/../shared/gpu/wheels.sh
	mv .whl/stage/.whl/* .whl/ && rm -rf .whl/stage
	bash benchmarks/gpu_wheels.sh

# On a GPU machine: does CUDA start in the attack's sandbox (and if not, which restriction stops it)
gpu-sandbox:
	$(GPU_ENV) $(GPU_PY) -m benchmarks.sandbox_cuda

lint: $(STAMP)
	$(BIN)/ruff check decpriv hydra_plugins tests benchmarks
	$(BIN)/ruff format --check decpriv hydra_plugins tests benchmarks

format: $(STAMP)
	$(BIN)/ruff check --fix decpriv hydra_plugins tests benchmarks
	$(BIN)/ruff format decpriv hydra_plugins tests benchmarks

clean:
	rm -rf $(VENV) runs/*/ .pytest_cache .ruff_cache *.egg-info
