"""What happens after a forward: prompt logprobs, sampling, output logprobs, appending tokens
(with jump-forward over forced constraint text), and the messages reported back per request."""

from __future__ import annotations

import torch

from sgl_runtime.host_to_device import to_device
from sgl_runtime.io_struct import ReqTokenOutput
from sgl_runtime.logprobs import token_logprobs
from sgl_runtime.sampler import Sampler
from sgl_runtime.scheduler.req import Req
from sgl_runtime.scheduler.schedule_batch import ScheduleBatch


@torch.inference_mode()  # the logits are inference tensors, edited in place by the sampler
def process_batch_logits(batch: ScheduleBatch, logits: torch.Tensor, sampler: Sampler, jump_forward: bool) -> int:
    """Consume the logits of one forward; returns how many output tokens were added."""
    if batch.plain_decode:
        return _append_sampled(batch.reqs, logits, sampler, jump_forward)
    record_prompt_logprobs(batch, logits)
    layout = batch.layout
    rows = [end - 1 for end, s, r in zip(layout.row_end, layout.samples, batch.reqs) if s and r.max_new_tokens > 0]
    reqs = [r for s, r in zip(layout.samples, batch.reqs) if s and r.max_new_tokens > 0]
    for req, samples in zip(batch.reqs, layout.samples):
        if samples and req.max_new_tokens == 0:
            req.finish({"type": "length", "length": 0})
    if not reqs:
        return 0
    if rows == list(range(logits.shape[0])):
        sample_logits = logits  # every row samples (decode): no [B, V] gather; the sampler edits it in place
    else:
        sample_logits = logits.index_select(0, to_device(rows, torch.int64, logits.device))  # [B, V]
    return _append_sampled(reqs, sample_logits, sampler, jump_forward)


def _append_sampled(reqs: list[Req], sample_logits: torch.Tensor, sampler: Sampler, jump_forward: bool) -> int:
    """Sample one token per row of sample_logits [B, V] (row i: reqs[i]) and append it (plus forced text)."""
    lp_index = [i for i, r in enumerate(reqs) if r.return_logprob]
    raw = sample_logits[lp_index].clone() if lp_index else None
    next_ids = sampler(sample_logits, reqs).tolist()
    if raw is not None:
        rows = token_logprobs(
            raw,
            [next_ids[i] for i in lp_index],
            [reqs[i].top_logprobs_num for i in lp_index],
            [reqs[i].token_ids_logprob for i in lp_index],
        )
        for i, lp, top, by_id in zip(lp_index, rows.chosen, rows.tops, rows.token_ids):
            reqs[i].output_token_logprobs.append((lp, next_ids[i]))
            reqs[i].output_top_logprobs.append(top)
            reqs[i].output_token_ids_logprobs.append(by_id)
    if not (jump_forward and any(r.matcher is not None for r in reqs)):
        for req, token_id in zip(reqs, next_ids):
            req.append_token(token_id)  # tolist() gave Python ints
        return len(reqs)
    return sum(append_sampled(req, token_id, jump_forward=True) for req, token_id in zip(reqs, next_ids))


def append_sampled(req: Req, token_id: int, jump_forward: bool) -> int:
    """Append a sampled token and, with jump-forward on, the text it forces; returns the tokens added."""
    before = len(req.output_ids)
    req.append_token(token_id)
    if jump_forward and not req.finished:
        jump_forward_(req)
    return len(req.output_ids) - before


def jump_forward_(req: Req) -> None:
    """Append the tokens the constraint forces from here; they are computed in the next forward.
    (Skipped for requests that want logprobs, whose every token must come with a distribution.)"""
    if req.matcher is None or req.return_logprob:
        return
    for token_id in req.matcher.forced_token_ids():
        if req.finished:
            break
        req.append_token(int(token_id))


def record_prompt_logprobs(batch: ScheduleBatch, logits: torch.Tensor) -> None:
    """Score the prompt positions this forward covered; finalize once the prompt is complete."""
    layout = batch.layout
    rows: list[int] = []
    targets: list[int] = []
    top_nums: list[int] = []
    by_ids: list = []
    for req, start, targets_i in zip(batch.reqs, layout.row_start, layout.score_targets):
        rows.extend(range(start, start + len(targets_i)))
        targets.extend(targets_i)
        top_nums.extend([req.top_logprobs_num] * len(targets_i))
        by_ids.extend([req.token_ids_logprob] * len(targets_i))
    if rows:
        scored = token_logprobs(logits[torch.tensor(rows, device=logits.device)], targets, top_nums, by_ids)
        offset = 0
        for req, targets_i in zip(batch.reqs, layout.score_targets):
            n = len(targets_i)
            req.input_logprobs_acc.extend(zip(scored.chosen[offset : offset + n], targets_i))
            req.input_top_acc.extend(scored.tops[offset : offset + n])
            req.input_token_ids_acc.extend(scored.token_ids[offset : offset + n])
            offset += n
    for req, samples in zip(batch.reqs, layout.samples):
        if samples and req.need_input_logprobs:
            first = [(None, req.origin_input_ids[0])] if req.logprob_start_len == 0 else []
            req.input_token_logprobs = first + req.input_logprobs_acc
            req.input_top_logprobs = ([None] if first else []) + req.input_top_acc
            req.input_token_ids_logprobs = ([None] if first else []) + req.input_token_ids_acc
            req.input_logprobs_acc, req.input_top_acc, req.input_token_ids_acc = [], [], []


def make_token_output(req: Req) -> ReqTokenOutput:
    """The request's news since its last message (all of it for non-streaming requests)."""
    params = req.sampling_params
    start, end = req.sent_len, len(req.output_ids)
    out = ReqTokenOutput(
        rid=req.rid,
        new_output_ids=req.output_ids[start:end],
        finished_reason=req.finished_reason,
        prompt_tokens=len(req.origin_input_ids),
        completion_tokens=end,
        cached_tokens=req.cached_tokens or 0,
        skip_special_tokens=params.skip_special_tokens,
        spaces_between_special_tokens=params.spaces_between_special_tokens,
        no_stop_trim=params.no_stop_trim,
        error=req.error,
        stop_strs=tuple(params.stop),
        stop_regexes=tuple(params.stop_regex),
        index=req.index,
        forward_passes=req.forward_passes,
        queue_time=req.queue_time,
    )
    if req.return_logprob:
        if not req.input_logprobs_sent and (req.input_token_logprobs is not None or req.finished):
            out.input_token_logprobs = req.input_token_logprobs or []
            out.input_top_logprobs = req.input_top_logprobs or []
            if req.token_ids_logprob is not None:
                out.input_token_ids_logprobs = req.input_token_ids_logprobs or []
            req.input_logprobs_sent = True
        out.new_output_token_logprobs = req.output_token_logprobs[start:end]
        out.new_output_top_logprobs = req.output_top_logprobs[start:end]
        if req.token_ids_logprob is not None:
            out.new_output_token_ids_logprobs = req.output_token_ids_logprobs[start:end]
    req.sent_len = end
    return out


def should_stream(req: Req, interval: int) -> bool:
    return req.stream and len(req.output_ids) - req.sent_len >= interval
