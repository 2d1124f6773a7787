#!/usr/bin/env bash
# For a machine with a CUDA GPU and torch installed with CUDA: the conformance table of the
# torch path on the GPU (non-zero exit on any mismatch), then timings against baselines.
#   bash benchmarks/gpu_verify.sh            # full suite + 4096 and 16384 timings
#   QUICK=1 bash benchmarks/gpu_verify.sh    # --quick suite + 4096 timings only
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
python="${PYTHON:-python}"
"$python" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
if [[ "${QUICK:-0}" == 1 ]]; then
  "$python" -m nmsim verify --device cuda --quick
  "$python" benchmarks/bench_torch.py --device cuda --size 4096
else
  "$python" -m nmsim verify --device cuda
  "$python" -m nmsim verify --device cpu --quick
  for size in 4096 16384; do
    "$python" benchmarks/bench_torch.py --device cuda --size "$size"
  done
fi
