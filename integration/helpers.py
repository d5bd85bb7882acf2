"""What the engine suite shares: a tiny local model, trainer-side logits, row classes, the report."""

from __future__ import annotations

import json
import os
import resource
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

#: The tiny model: head size 32 (the smallest vLLM's CPU attention takes), 2 layers, V = 512.
VOCAB = 512
MAX_LEN = 128
PROMPTS = [[5, 17, 42, 99, 7], [300, 12, 8], [64, 65, 66, 67, 68, 69], [11, 400, 3, 250]]
NEW_TOKENS = 16


def word_tokenizer(vocab: int = VOCAB) -> Any:
    """A word-level tokenizer of ``vocab`` tokens: ``<pad>`` 0, ``<eos>`` 1, ``<unk>`` 2 and ``w3`` ..
    ``w<vocab - 1>`` (each word's id is its number), words split on white space; no download."""
    import tokenizers
    import transformers

    words = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def tiny_qwen2(vocab: int = VOCAB, *, seed: int = 0) -> Any:
    """A random-weight Qwen2 (fp32, d = 64, 2 layers, untied head); ``initializer_range=0.2`` gives
    peaked distributions: every filter cuts."""
    import torch
    import transformers

    config = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=MAX_LEN,
        initializer_range=0.2,
        pad_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    return transformers.Qwen2ForCausalLM(config)


def build_tiny_model(directory: Path, *, seed: int = 0) -> Path:
    """:func:`tiny_qwen2` in ``directory / "model"`` and :func:`word_tokenizer` (``VOCAB`` tokens) in
    ``directory / "tokenizer"`` (:func:`tokenizer_path`).

    The tokenizer is also saved beside the model, for engines that load it from the model's path
    (only to detokenize: prompts go in as token ids); there transformers 5 loads it as a
    ``Qwen2Tokenizer`` (from ``config.json``'s model type), which cannot encode these words. Loaded
    from its own folder it is the word-level tokenizer it was saved as."""
    tokenizer = word_tokenizer()
    tiny_qwen2(seed=seed).save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "tokenizer")
    return directory / "model"


def tokenizer_path(model_dir: Path) -> Path:
    """The folder of the tiny model's tokenizer (see :func:`build_tiny_model`)."""
    return Path(model_dir).parent / "tokenizer"


def trainer_logits(model_dir: Path, prompts: list[list[int]], completions: list[list[int]]) -> Any:
    """The trainer's raw logits [sum of completion lengths, V] (fp32, transformers' forward): row t of a
    completion is the logits that predicted its token t."""
    import torch

    model = _hf_model(str(model_dir))
    parts = []
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            ids = torch.tensor([list(prompt) + list(completion)])
            logits = model(input_ids=ids).logits[0]
            parts.append(logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)].float())
    return torch.cat(parts)


_MODELS: dict[str, Any] = {}


def _hf_model(path: str) -> Any:
    import transformers

    if path not in _MODELS:
        _MODELS[path] = transformers.AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()
    return _MODELS[path]


def peak_rss_mib() -> float:
    """The largest peak resident memory of this process and of its ended children (the engine core,
    the server), MiB (Linux reports KiB)."""
    kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    )
    return kib / 1024


def record_figures(name: str, figures: dict[str, Any]) -> None:
    """Add ``figures`` under ``name`` to the JSON file ``SAMPLING_MASK_ENGINE_REPORT`` names (if set)."""
    path = os.environ.get("SAMPLING_MASK_ENGINE_REPORT")
    if not path:
        return
    file = Path(path)
    report = json.loads(file.read_text()) if file.exists() else {}
    report[name] = figures
    file.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_json(url: str, body: dict[str, Any], timeout: float = 600) -> Any:
    """POST ``body`` as JSON, the decoded answer; an HTTP error fails with the server's message."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{url}: HTTP {error.code}: {error.read().decode()[:2000]}") from None
