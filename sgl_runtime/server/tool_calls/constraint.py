"""The constraint that makes tool calls valid by construction, as a `structural_tag` node tree
(sgl_runtime/constrained/triggered.py): the call wrapper of the format around each tool's
parameter schema; `required` is a union over the tools with no free text, `auto` is free text
where the format's trigger starts a constrained block, and any constraint follows the reasoning.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.reasoning import ReasoningFormat
from sgl_runtime.server.tool_calls.formats import ToolCallFormat

ANSWER_LEAD = {"regex": "[ \\n]{0,3}"}  # blank lines a model writes between </think> and its answer


def arguments_schema(parameters: Any) -> Any:
    """A tool's arguments schema: its parameters, or any JSON object when it declares none."""
    if parameters is None or parameters is True or parameters == {}:
        return {"type": "object"}
    return parameters


def call_node(fmt: ToolCallFormat, name: str, parameters: Any) -> dict:
    schema = {"json_schema": arguments_schema(parameters), "label": f"tool {name!r}: its parameters cannot be compiled"}
    return {"sequence": [{"text": fmt.call_prefix(name)}, schema, {"text": fmt.call_suffix}]}


def calls_node(fmt: ToolCallFormat, tools: list[tuple[str, Any]], parallel: bool) -> dict:
    """One or more blocks of calls (at least one call in all; exactly one unless `parallel`)."""
    one = {"any_of": [call_node(fmt, name, params) for name, params in tools]}
    per_block = 1 if not parallel else fmt.calls_per_block
    block_calls = {"repeat": one, "min": 1, "max": per_block}
    if fmt.call_separator:
        block_calls["separator"] = {"text": fmt.call_separator}
    block = {"sequence": [{"text": fmt.block_start}, block_calls, {"text": fmt.block_end}]}
    if not parallel or fmt.calls_per_block is None:
        return block
    return {"repeat": block, "min": 1, "max": None, "separator": {"text": fmt.block_separator}}


def required_node(fmt: ToolCallFormat, tools: list[tuple[str, Any]], parallel: bool) -> dict:
    return calls_node(fmt, tools, parallel)


def auto_node(fmt: ToolCallFormat, tools: list[tuple[str, Any]], parallel: bool) -> dict:
    """Free text; the trigger starts a block of valid calls; free text again after it."""
    free = {"free_text": {"excluding": [fmt.trigger]}}
    blocks = calls_node(fmt, tools, parallel)
    if parallel:
        return {"sequence": [{"repeat": {"sequence": [free, blocks]}, "min": 0, "max": None}, free]}
    return {"sequence": [free, {"optional": {"sequence": [blocks, free]}}]}


def answer_node(kind: str, spec: Any) -> dict:
    """A response constraint (from response_format or the SGLang extensions) as a node."""
    if kind == "json_schema":
        return {"json_schema": json.loads(spec) if isinstance(spec, str) else spec}
    if kind == "regex":
        return {"regex": spec}
    if kind == "choices":
        return {"any_of": [{"text": c} for c in spec]}
    if kind == "structural_tag":
        from sgl_runtime.constrained.triggered import parse_spec

        return parse_spec(spec)["root"]
    raise InvalidRequestError(f"a {kind} constraint cannot be combined with a reasoning parser or with tools")


def after_reasoning(answer: dict, fmt: ReasoningFormat, open_at_start: bool) -> dict:
    """`answer` applied after the reasoning block: free text up to the end marker, never inside it."""
    thought = {"sequence": [{"free_text": {"excluding": [fmt.end]}}, {"text": fmt.end}, ANSWER_LEAD, answer]}
    if open_at_start:
        return {"sequence": [{"optional": {"text": fmt.start}}, thought]}
    return {"any_of": [answer, {"sequence": [{"text": fmt.start}, thought]}]}


def structural_tag(root: dict) -> str:
    return json.dumps({"type": "triggered", "root": root}, ensure_ascii=False)


def maybe_after_reasoning(root: Optional[dict], fmt: Optional[ReasoningFormat], open_at_start: bool) -> Optional[dict]:
    if root is None or fmt is None:
        return root
    return after_reasoning(root, fmt, open_at_start)
