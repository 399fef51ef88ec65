"""Glue for /v1/chat/completions: checks each tool's schema (a 400 naming the tool), and turns
native results into OpenAI chat responses and stream chunks with reasoning and tool calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sgl_runtime.server.openai_responses import StreamBuilder, chat_response
from sgl_runtime.server.tool_calls.output import ChoiceParser, ChoiceStream, tool_finish_reason


def chat_tool_response(results: list[dict], model: str, n: int, logprobs: bool, parser: ChoiceParser) -> dict:
    """chat_response with each message split into reasoning_content, content and tool_calls."""
    response = chat_response(results, model, n, logprobs)
    for choice, result in zip(response["choices"], results):
        choice["message"] = parser.message(result["text"])
        choice["finish_reason"] = tool_finish_reason(choice["finish_reason"], "tool_calls" in choice["message"])
    return response


@dataclass
class ChatStreamBuilder(StreamBuilder):
    """StreamBuilder whose deltas carry reasoning_content and tool_calls besides content."""

    parser: Any = None
    streams: dict = field(default_factory=dict)

    def chunk(self, result: dict) -> dict:
        out = super().chunk(result)
        choice = out["choices"][0]
        stream = self.streams.setdefault(choice["index"], ChoiceStream(self.parser))
        final = choice["finish_reason"] is not None
        delta = {k: v for k, v in choice["delta"].items() if k == "role"}
        delta.update(stream.delta(result["text"], final))
        choice["delta"] = delta
        choice["finish_reason"] = tool_finish_reason(choice["finish_reason"], stream.made_calls)
        return out
