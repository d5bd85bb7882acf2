"""vLLM's real HTTP server (``python -m vllm.entrypoints.openai.api_server --return-sampling-mask
--enable-scale-out`` on 127.0.0.1): ``/inference/v1/generate`` plain and streamed through every
generate reader of ``sampling_mask.adapters.vllm``, the scorer against the served log-probs, and what
the OpenAI endpoints carry (no masks in 0.32).
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
from helpers import (
    NEW_TOKENS,
    PROMPTS,
    VOCAB,
    build_tiny_model,
    free_port,
    post_json,
    record_figures,
    tokenizer_path,
    trainer_logits,
)

vllm = pytest.importorskip("vllm")

from sampling_mask import concat  # noqa: E402
from sampling_mask.adapters import vllm as adapter  # noqa: E402
from sampling_mask.reference_scorer import masked_logprobs  # noqa: E402

STARTUP_S = 900  # the Triton interpreter compiles nothing, but vLLM's start-up is minutes on 2 cores
#: name -> sampling_params (top_k > 0 always: vLLM returns masks only then).
REQUESTS = {
    "top_k=20": {"temperature": 1.0, "top_k": 20},
    "top_p=0.9,min_p=0.05": {"temperature": 0.9, "top_k": VOCAB, "top_p": 0.9, "min_p": 0.05},
}
LISTED = 20


def _post_stream(url: str, body: dict[str, Any], timeout: float = 600) -> list[Any]:
    """The ``data:`` chunks of a server-sent-events response, decoded, without ``[DONE]``."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for line in response:
            text = line.decode().strip()
            if text.startswith("data:") and text[5:].strip() != "[DONE]":
                chunks.append(json.loads(text[5:]))
    return chunks


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2-server"))


@pytest.fixture(scope="module")
def server(model_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--tokenizer", str(tokenizer_path(model_dir)), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "128", "--enforce-eager", "--seed", "0",
        "--generation-config", "vllm", "--logprobs-mode", "processed_logprobs",
        "--return-sampling-mask", "--enable-scale-out", "--chat-template-content-format", "string",
    ]  # fmt: skip
    started = time.perf_counter()
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.perf_counter() - started > STARTUP_S:
                pytest.fail(f"the server did not start in {STARTUP_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(2)
        record_figures("server start", {"start_s": round(time.perf_counter() - started, 1)})
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def generate_body(prompt: list[int], params: dict[str, Any], seed: int, stream: bool) -> dict[str, Any]:
    sampling = {**params, "max_tokens": NEW_TOKENS, "ignore_eos": True, "seed": seed, "logprobs": LISTED}
    return {"token_ids": prompt, "sampling_params": sampling, "stream": stream}


@pytest.fixture(scope="module")
def generated(server: str) -> dict[str, Any]:
    """Per request config: each prompt's plain body and its streamed chunks (same seed)."""
    out: dict[str, Any] = {}
    for n, (name, params) in enumerate(REQUESTS.items()):
        plain, streamed = [], []
        for i, prompt in enumerate(PROMPTS):
            seed = 100 * n + i
            plain.append(post_json(f"{server}/inference/v1/generate", generate_body(prompt, params, seed, False)))
            streamed.append(_post_stream(f"{server}/inference/v1/generate", generate_body(prompt, params, seed, True)))
        out[name] = {"plain": plain, "streamed": streamed}
    return out


@pytest.mark.parametrize("name", list(REQUESTS))
def test_generate_plain_and_streamed_agree(generated: dict[str, Any], name: str) -> None:
    """``from_generate_response``, ``from_generate_stream`` and ``merge_generate_stream``: the same rows,
    each ascending and holding its sampled token, for the plain and the streamed body of one seed."""
    same = 0
    for body, chunks in zip(generated[name]["plain"], generated[name]["streamed"], strict=True):
        (mask,) = adapter.from_generate_response(body, vocab_size=VOCAB)
        (streamed,) = adapter.from_generate_stream(chunks, vocab_size=VOCAB)
        (merged,) = adapter.merge_generate_stream(chunks)
        assert mask is not None and streamed is not None
        assert mask.to_rows() == body["choices"][0]["sampling_mask"]
        assert mask.sampled_token_ids.tolist() == body["choices"][0]["token_ids"]
        assert merged["sampling_mask"] == streamed.to_rows()
        assert mask.num_rows == NEW_TOKENS and len(chunks) > 1  # streamed in several chunks
        assert all(t in row for t, row in zip(mask.sampled_token_ids.tolist(), mask.to_rows(), strict=True))
        same += streamed == mask
    assert same == len(PROMPTS)
    record_figures(f"server {name}", {"requests": len(PROMPTS), "streamed_equals_plain": same})


@pytest.mark.parametrize("name", list(REQUESTS))
def test_generate_logprobs_agree_with_the_mask(generated: dict[str, Any], name: str) -> None:
    """``from_generate_logprobs`` (``logprobs.content``): a row no wider than the listing is the engine's
    row; a wider one is flagged truncated, and what it keeps is in the engine's row."""
    for body in generated[name]["plain"]:
        choice = body["choices"][0]
        listing = adapter.from_generate_logprobs(choice, allow_truncated=True)
        assert listing.sampled_token_ids.tolist() == choice["token_ids"]
        for got, want in zip(listing.to_rows(), choice["sampling_mask"], strict=True):
            assert set(got) <= set(want)
            if len(want) < LISTED:  # the listing holds the sampled token plus LISTED ranked ones
                assert set(got) == set(want)


@pytest.mark.parametrize("name", list(REQUESTS))
def test_replay_equals_the_served_logprobs(model_dir: Any, generated: dict[str, Any], name: str) -> None:
    bodies = generated[name]["plain"]
    masks = [adapter.from_generate_response(b, vocab_size=VOCAB)[0] for b in bodies]
    mask = concat(masks)
    logits = trainer_logits(model_dir, PROMPTS, [b["choices"][0]["token_ids"] for b in bodies])
    served = np.array([e["logprob"] for b in bodies for e in b["choices"][0]["logprobs"]["content"]])
    replay = masked_logprobs(logits, mask, temperature=REQUESTS[name]["temperature"]).logprobs.double().numpy()
    error = float(np.max(np.abs(replay - served)))
    assert error < 1e-5, f"{name}: replay differs from the served logprobs by {error:.2e}"
    record_figures(f"server replay {name}", {"rows": mask.num_rows, "max_replay_error": error})


def test_openai_endpoints_carry_no_mask(server: str) -> None:
    """In 0.32 ``/v1/completions`` and ``/v1/chat/completions`` carry no ``sampling_mask`` (the
    adapter's documented position: only ``/inference/v1/generate`` does). Fails, so the docs get
    updated, the day a release adds one."""
    params = {"max_tokens": 4, "temperature": 1.0, "top_k": 20, "logprobs": 2}
    completion = post_json(f"{server}/v1/completions", {"model": "tiny", "prompt": PROMPTS[0], **params})
    chat = post_json(
        f"{server}/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "w5 w6"}], "max_tokens": 4, "top_k": 20},
    )
    for body in (completion, chat):
        assert body["choices"] and "sampling_mask" not in json.dumps(body)
