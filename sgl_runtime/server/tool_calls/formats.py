"""How each model family writes tool calls, named as SGLang's --tool-call-parser names them.

A format is data: the marker that starts a block of calls (the trigger), the text around each
call's `{"name": ..., "arguments": ...}` object, and how calls are separated. Parsing
(tool_calls/parser.py) and the constraint (tool_calls/constraint.py) both read it, so a new model
family is one more entry here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    trigger: str  # free text ends where this appears; the block of calls starts with it
    block_start: str  # the trigger plus any fixed text before the first call
    block_end: str  # text closing a block
    call_separator: str  # between calls inside one block ("" : one call per block)
    block_separator: str  # between consecutive blocks (formats with one call per block)
    arguments_key: str = "arguments"
    special_markers: bool = False  # the markers are special tokens: keep them in the decoded text

    @property
    def calls_per_block(self) -> Optional[int]:
        """1 when every call has its own block, None (unbounded) otherwise."""
        return 1 if not self.call_separator else None

    def call_prefix(self, tool_name: str) -> str:
        """The call's text before its arguments (the arguments are a JSON object)."""
        return '{"name": ' + json.dumps(tool_name, ensure_ascii=False) + f', "{self.arguments_key}": '

    call_suffix = "}"

    def render(self, calls: list[tuple[str, str]]) -> str:
        """Calls [(name, arguments JSON)] as the model writes them (for tests and examples)."""
        bodies = [self.call_prefix(n) + a + self.call_suffix for n, a in calls]
        if self.calls_per_block == 1:
            return self.block_separator.join(self.block_start + b + self.block_end for b in bodies)
        return self.block_start + self.call_separator.join(bodies) + self.block_end


FORMATS: dict[str, ToolCallFormat] = {
    # Qwen2.5 / Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
    "qwen25": ToolCallFormat("qwen25", "<tool_call>", "<tool_call>\n", "\n</tool_call>", "", "\n"),
    # Llama 3.x JSON tool calls: <|python_tag|>{"name": ..., "parameters": {...}}; {...}
    "llama3": ToolCallFormat(
        "llama3", "<|python_tag|>", "<|python_tag|>", "", "; ", "", arguments_key="parameters", special_markers=True
    ),
    # Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, {...}]
    "mistral": ToolCallFormat("mistral", "[TOOL_CALLS]", "[TOOL_CALLS] [", "]", ", ", "", special_markers=True),
}
ALIASES = {"hermes": "qwen25", "qwen": "qwen25", "qwen3": "qwen25", "llama3.1": "llama3", "llama32": "llama3"}
PARSER_NAMES = tuple(FORMATS) + tuple(ALIASES)


def get_format(name: str) -> ToolCallFormat:
    """The format for a --tool-call-parser name (ValueError naming the known ones)."""
    key = ALIASES.get(name, name)
    if key not in FORMATS:
        raise ValueError(f"unknown tool-call parser {name!r}; expected one of {', '.join(PARSER_NAMES)}")
    return FORMATS[key]


def detect_format(chat_template: Optional[str]) -> Optional[ToolCallFormat]:
    """The format a chat template writes tool calls in, from its markers (None if it has none)."""
    if not chat_template:
        return None
    if "<tool_call>" in chat_template:
        return FORMATS["qwen25"]
    if "[TOOL_CALLS]" in chat_template:
        return FORMATS["mistral"]
    if "<|python_tag|>" in chat_template or ("ipython" in chat_template and '"parameters"' in chat_template):
        return FORMATS["llama3"]
    return None
