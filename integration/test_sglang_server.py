"""SGLang's real server, the same way as vLLM's (``test_vllm_server.py``): skipped where ``sglang`` is
not installed, which is every machine this suite has run on so far (docs/adapters.md, "The engine
suite", says why SGLang 0.5.23 cannot run on them). Not run yet: treat a first run as a first test.

It starts ``python -m sglang.launch_server`` on the tiny model and checks
``sampling_mask.adapters.sglang.from_response`` on ``/generate`` bodies with
``return_sampling_mask=True`` (rows hold their sampled id, ``output_token_sampling_mask_length``
agrees) and replay against SGLang's ``output_token_logprobs`` (1e-5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest
from helpers import NEW_TOKENS, PROMPTS, VOCAB, build_tiny_model, free_port, post_json, tokenizer_path, trainer_logits

pytest.importorskip("sglang", reason="SGLang is not installed (docs/adapters.md: why it cannot run on CPU here)")

from sampling_mask import concat  # noqa: E402
from sampling_mask.adapters import sglang as adapter  # noqa: E402
from sampling_mask.reference_scorer import masked_logprobs  # noqa: E402

SAMPLING = {"temperature": 1.0, "top_k": 20, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model_dir = build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2-sglang"))
    port = free_port()
    command = [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", str(model_dir), "--tokenizer-path", str(tokenizer_path(model_dir)),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--random-seed", "0",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            if process.poll() is not None:
                pytest.fail(f"the SGLang server exited ({process.returncode})")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    pytest.fail("the SGLang server did not start in 900 s")
                time.sleep(2)
        yield base, model_dir
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_generate_rows_and_replay(server: Any) -> None:
    base, model_dir = server
    bodies = [
        post_json(
            f"{base}/generate",
            {
                "input_ids": prompt,
                "sampling_params": {**SAMPLING, "sampling_seed": i},
                "return_sampling_mask": True,
                "return_logprob": True,
            },
        )
        for i, prompt in enumerate(PROMPTS)
    ]
    masks = []
    for body in bodies:
        mask = adapter.from_response(body, vocab_size=VOCAB)
        ids = body["output_ids"]
        assert mask.num_rows == len(ids) == NEW_TOKENS
        assert all(t in row for t, row in zip(ids, mask.to_rows(), strict=True))
        masks.append(mask.replace(sampled_token_ids=np.asarray(ids, dtype=np.int32)))
    logits = trainer_logits(model_dir, PROMPTS, [b["output_ids"] for b in bodies])
    served = np.array([e[0] for b in bodies for e in b["meta_info"]["output_token_logprobs"]], dtype=np.float64)
    replay = masked_logprobs(logits, concat(masks), temperature=SAMPLING["temperature"]).logprobs.double().numpy()
    assert float(np.max(np.abs(replay - served))) < 1e-5, json.dumps(bodies[0])[:2000]
