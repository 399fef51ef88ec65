"""The request side of a chat completion with tools or reasoning: which tools the template sees,
the history in the template's shape, which parsers read the output, and the constraint.

`ChatPlan.build` checks everything a client can get wrong (unknown tool in tool_choice, tools
without a format, two constraints) and raises InvalidRequestError naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.reasoning import ReasoningFormat
from sgl_runtime.server.tool_calls import constraint as tc
from sgl_runtime.server.tool_calls.formats import ToolCallFormat

CONSTRAINT_KEYS = ("regex", "json_schema", "ebnf", "grammar", "choices", "structural_tag")


@dataclass
class ChatPlan:
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)  # OpenAI tool dicts, as the template receives them
    choice: str = "none"  # none | auto | required | named
    named: Optional[str] = None
    parallel: bool = True
    tool_format: Optional[ToolCallFormat] = None
    reasoning: Optional[ReasoningFormat] = None
    separate_reasoning: bool = True
    stream_reasoning: bool = True
    template_kwargs: dict = field(default_factory=dict)

    @classmethod
    def build(
        cls, body: Any, tool_format: Optional[ToolCallFormat], reasoning: Optional[ReasoningFormat]
    ) -> "ChatPlan":
        tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
        choice, named = _tool_choice(body.tool_choice, tools)
        if choice != "none" and tool_format is None:
            raise InvalidRequestError(
                "tools: this model's chat template shows no tool-call format; start the "
                "server with --tool-call-parser (qwen25, llama3 or mistral)"
            )
        names = [t["function"]["name"] for t in tools]
        if len(set(names)) != len(names):
            raise InvalidRequestError("tools: two tools have the same function name")
        return cls(
            messages=[_template_message(m) for m in body.messages],
            tools=tools if choice != "none" else [],
            choice=choice,
            named=named,
            parallel=body.parallel_tool_calls,
            tool_format=tool_format if choice != "none" else None,
            reasoning=reasoning,
            separate_reasoning=body.separate_reasoning,
            stream_reasoning=body.stream_reasoning,
            template_kwargs=dict(body.chat_template_kwargs or {}),
        )

    @property
    def tool_schemas(self) -> list[tuple[str, Any]]:
        return [(t["function"]["name"], t["function"].get("parameters")) for t in self.tools]

    def constrain(self, params: dict[str, Any], open_at_start: bool) -> dict[str, Any]:
        """`params` with the tool constraint added, and any constraint moved after the reasoning."""
        given = [k for k in CONSTRAINT_KEYS if k in params]
        root = None
        if self.choice != "none":
            if given:
                raise InvalidRequestError(f"{given[0]} cannot be combined with tools (tool_choice {self.choice})")
            root = self._tools_root()
        elif given and self.reasoning is not None:
            kind = {"grammar": "ebnf"}.get(given[0], given[0])
            root = tc.answer_node(kind, params.pop(given[0]))
        if root is None:
            return params
        params = {k: v for k, v in params.items() if k not in CONSTRAINT_KEYS}
        params["structural_tag"] = tc.structural_tag(tc.maybe_after_reasoning(root, self.reasoning, open_at_start))
        if self.tool_format is not None and self.tool_format.special_markers:
            params["skip_special_tokens"] = False  # the markers must reach the parser
        return params

    def _tools_root(self) -> dict:
        fmt = self.tool_format
        if self.choice == "named":
            return tc.required_node(fmt, [s for s in self.tool_schemas if s[0] == self.named], parallel=False)
        if self.choice == "required":
            return tc.required_node(fmt, self.tool_schemas, self.parallel)
        return tc.auto_node(fmt, self.tool_schemas, self.parallel)


def chat_parsers(server_args: Any, tokenizer: Any) -> tuple[Optional[ToolCallFormat], Optional[ReasoningFormat]]:
    """The tool-call format (--tool-call-parser, else the chat template's) and the reasoning format;
    ValueError at start-up for an unknown parser name."""
    from sgl_runtime.server.reasoning import get_reasoning_format
    from sgl_runtime.server.tool_calls.formats import detect_format, get_format
    from sgl_runtime.tokenizer_utils import get_chat_template

    name = server_args.tool_call_parser
    tool_format = get_format(name) if name else detect_format(get_chat_template(tokenizer))
    reasoning = get_reasoning_format(server_args.reasoning_parser) if server_args.reasoning_parser else None
    return tool_format, reasoning


def _tool_choice(choice: Any, tools: list[dict]) -> tuple[str, Optional[str]]:
    if choice is None:
        return ("auto" if tools else "none"), None
    if isinstance(choice, str):
        if choice != "none" and not tools:
            raise InvalidRequestError(f"tool_choice {choice!r} needs a non-empty tools list")
        return choice, None
    name = choice.function.name
    names = [t["function"]["name"] for t in tools]
    if name not in names:
        raise InvalidRequestError(
            f"tool_choice names function {name!r}, which is not in tools ({', '.join(names) or 'none given'})"
        )
    return "named", name


def _template_message(message: Any) -> dict:
    """A message as chat templates expect it: text content, tool-call arguments as objects."""
    out: dict[str, Any] = {"role": message.role, "content": message.text()}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)},
            }
            for c in message.tool_calls
        ]
    return out


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        raise InvalidRequestError(f"messages: tool call arguments are not valid JSON: {arguments[:80]!r}") from None
