#!/usr/bin/env bash
# The GPU checks in one script, for a lent GPU machine without a package registry:
#   pytest -m gpu, then bench/gpu.py (side-by-side decode rows, the LoRA server, QLoRA).
# Carried wheels in .whl/ are installed into /tmp/site first; the embedded model's tokenizer
# files are read from $CLAWRL_TOKENIZER_DIR (default .carry/tok). Logs go to $OUT (default
# /tmp/gpu-check). Each part has its own time limit so that one stuck part leaves the rest.
#
#   OUT=/tmp/out bash bench/gpu_check.sh [bench/gpu.py arguments...]
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export CLAWRL_TOKENIZER_DIR=${CLAWRL_TOKENIZER_DIR:-$PWD/.carry/tok}
PY=${PY:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
# the CLI beside the interpreter (bench/gpu.py starts `clawrl-app serve` from there): the
# app runs from this checkout, not from an installed wheel
exe=$(dirname "$($PY -c 'import sys; print(sys.executable)')")/clawrl-app
if [ ! -x "$exe" ]; then
  printf '#!%s\nimport sys\nfrom clawrl_app.cli import main\nsys.exit(main())\n' \
    "$($PY -c 'import sys; print(sys.executable)')" > "$exe" && chmod +x "$exe"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, transformers, peft; print('torch', torch.__version__, \
'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$OUT/gpu.txt"

timeout "${PYTEST_LIMIT:-180}" $PY -m pytest -q -m gpu -p no:cacheprovider -p no:randomly \
  ${PYTEST_ARGS:-tests/test_gpu.py tests/test_hardware.py} 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
echo "pytest -m gpu: exit ${PIPESTATUS[0]}"

timeout "${BENCH_LIMIT:-360}" $PY bench/gpu.py "$@" > "$OUT/bench-gpu.md" 2> "$OUT/bench-gpu.err"
echo "bench/gpu.py: exit $?"
cat "$OUT/bench-gpu.md"
tail -5 "$OUT/bench-gpu.err"
