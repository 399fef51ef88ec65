"""The response side: one choice's generated text as an OpenAI assistant message (reasoning_content,
content, tool_calls), whole or as streamed deltas (a call's id and name first, then argument
fragments), and finish_reason "tool_calls" when calls were made."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from sgl_runtime.server.reasoning import split_reasoning
from sgl_runtime.server.tool_calls.parser import ParsedCall, scan
from sgl_runtime.server.tool_calls.plan import ChatPlan


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ChoiceParser:
    """Parses one choice's cumulative text with the plan's reasoning and tool-call parsers."""

    plan: ChatPlan
    open_at_start: bool

    def split(self, text: str, final: bool) -> tuple[Optional[str], str, list[ParsedCall], bool]:
        """(reasoning or None, content, calls, reasoning_done) of `text`."""
        reasoning, done = None, True
        plan = self.plan
        if plan.reasoning is not None and plan.separate_reasoning:
            reasoning, text, done = split_reasoning(text, plan.reasoning, self.open_at_start, final)
        if plan.tool_format is None:
            return reasoning, text, [], done
        found = scan(text, plan.tool_format, final)
        content = found.content
        if found.calls:
            content = content.strip() if final else content.lstrip()
        return reasoning, content, found.calls, done

    def message(self, text: str) -> dict[str, Any]:
        reasoning, content, calls, _ = self.split(text, final=True)
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
        if reasoning is not None:
            message["reasoning_content"] = reasoning or None
        if calls:
            message["tool_calls"] = [
                {"id": new_call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ]
        return message


@dataclass
class ChoiceStream:
    """What of one choice was sent; `delta` gives the OpenAI delta fields for the next chunk."""

    parser: ChoiceParser
    reasoning_sent: int = 0
    content_sent: int = 0
    calls_sent: list = field(default_factory=list)  # [id, arguments_sent] per call
    made_calls: bool = False

    def delta(self, text: str, final: bool) -> dict[str, Any]:
        reasoning, content, calls, done = self.parser.split(text, final)
        out: dict[str, Any] = {}
        if reasoning is not None and (self.parser.plan.stream_reasoning or done or final):
            if len(reasoning) > self.reasoning_sent:
                out["reasoning_content"] = reasoning[self.reasoning_sent :]
                self.reasoning_sent = len(reasoning)
        if not final and calls:
            content = content.rstrip()
        if len(content) > self.content_sent:
            out["content"] = content[self.content_sent :]
            self.content_sent = len(content)
        deltas = self._call_deltas(calls)
        if deltas:
            out["tool_calls"] = deltas
        return out

    def _call_deltas(self, calls: list[ParsedCall]) -> list[dict]:
        deltas = []
        for index, call in enumerate(calls):
            if index == len(self.calls_sent):
                self.calls_sent.append([new_call_id(), 0])
                self.made_calls = True
                deltas.append(
                    {
                        "index": index,
                        "id": self.calls_sent[index][0],
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                )
            sent = self.calls_sent[index]
            if len(call.arguments) > sent[1]:
                deltas.append({"index": index, "function": {"arguments": call.arguments[sent[1] :]}})
                sent[1] = len(call.arguments)
        return deltas


def tool_finish_reason(reason: Optional[str], made_calls: bool) -> Optional[str]:
    """OpenAI's finish_reason: "tool_calls" when the model stopped after calling tools."""
    return "tool_calls" if made_calls and reason == "stop" else reason
