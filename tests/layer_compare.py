"""Per-layer comparison against transformers: the hidden state after every decoder layer and the final
logits of our model (loaded through the real loader, run through the test harness) vs the HF model."""

from __future__ import annotations

from typing import Sequence

import torch
from model_fixtures import _hf_model, load_for_test


def hf_layer_outputs(path: str, token_ids: Sequence[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """transformers' hidden state after each decoder layer [len, hidden] and its logits [len, vocab]."""
    model = _hf_model(path)
    captured: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: captured.append(_first(out)[0].detach()))
        for layer in model.model.layers
    ]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([list(token_ids)])).logits[0].float()
    finally:
        for hook in hooks:
            hook.remove()
    return captured, logits


def our_layer_outputs(path: str, token_ids: Sequence[int], **harness_kwargs) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Our hidden state after each decoder layer (its output plus the running residual) and our logits."""
    model, harness = load_for_test(path, harness_kwargs=harness_kwargs or None)
    captured: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, out: captured.append((out[0] + out[1]).detach()))
        for layer in model.model.layers
    ]
    try:
        logits = harness.run_forward([(harness.new_request(), 0, list(token_ids))])[0]
    finally:
        for hook in hooks:
            hook.remove()
    return captured, logits


def assert_layers_match(path: str, token_ids: Sequence[int], atol: float = 2e-4, **harness_kwargs) -> None:
    """Every layer's hidden state and the logits equal transformers' (float32, CPU) within atol."""
    ref_layers, ref_logits = hf_layer_outputs(path, token_ids)
    ours, logits = our_layer_outputs(path, token_ids, **harness_kwargs)
    assert len(ours) == len(ref_layers) > 0
    for i, (mine, ref) in enumerate(zip(ours, ref_layers)):
        torch.testing.assert_close(mine, ref, atol=atol, rtol=1e-4, msg=lambda m, i=i: f"layer {i}: {m}")
    assert ref_logits.abs().max() > 1.0  # the comparison means something
    torch.testing.assert_close(logits, ref_logits, atol=atol, rtol=1e-4)


def _first(out):
    return out[0] if isinstance(out, tuple) else out
