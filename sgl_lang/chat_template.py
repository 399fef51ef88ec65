"""Role formatting derived from the served model's own Jinja chat template.

The template is rendered for conversations that differ by one message whose content is a
sentinel; the text around the sentinel is that role's prefix and suffix. A template that adds
text only when no system message is given (a default system prompt) yields `preamble`, inserted
before the first non-system turn of a program that has no system turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

_SENTINEL = "\x1fSGL_CONTENT\x1f"
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class ChatTemplate:
    """Per-role (prefix, suffix) strings plus an optional preamble."""

    role_prefix_and_suffix: dict = field(default_factory=dict)
    preamble: str = ""

    def get_prefix_and_suffix(self, role: str) -> tuple[str, str]:
        if role not in self.role_prefix_and_suffix:
            raise ValueError(f"unknown role {role!r}; this template knows {', '.join(self.role_prefix_and_suffix)}")
        return self.role_prefix_and_suffix[role]

    @property
    def default_system_prompt(self) -> Optional[str]:
        """The system message content inside `preamble`, when the preamble is one system turn."""
        prefix, suffix = self.role_prefix_and_suffix.get("system", ("", ""))
        if self.preamble and prefix and self.preamble.startswith(prefix) and self.preamble.endswith(suffix):
            return self.preamble[len(prefix) : len(self.preamble) - len(suffix)]
        return None


# Used when the server reports no chat template (a base model).
PLAIN_TEMPLATE = ChatTemplate(
    {"system": ("", "\n\n"), "user": ("Question: ", "\n\n"), "assistant": ("Answer: ", "\n\n")}
)


def chat_template_from_jinja(source: Optional[str], special_tokens: Optional[dict] = None) -> ChatTemplate:
    """Derive role prefixes/suffixes from a Hugging Face Jinja chat template (None -> plain)."""
    if not source:
        return PLAIN_TEMPLATE
    render = _renderer(source, special_tokens or {})
    system_msg = {"role": "system", "content": "S"}
    user_msg = {"role": "user", "content": "U"}
    roles = {"user": _affixes(render, [], "user")}
    try:
        roles["system"] = _affixes(render, [], "system")
    except Exception:  # templates that refuse a system turn: render it as a user turn
        roles["system"] = roles["user"]
    base = [system_msg] if roles["system"] is not roles["user"] else []
    roles["user"] = _affixes(render, base, "user")
    roles["assistant"] = _affixes(render, base + [user_msg], "assistant")
    preamble = _preamble(render, roles["user"][0])
    return ChatTemplate(roles, preamble)


def _affixes(render, history: list, role: str) -> tuple[str, str]:
    before = render(history) if history else ""
    full = render(history + [{"role": role, "content": _SENTINEL}])
    if not full.startswith(before) or _SENTINEL not in full:
        raise ValueError(f"chat template does not render a {role} turn after {len(history)} messages")
    prefix, suffix = full[len(before) :].split(_SENTINEL, 1)
    return prefix, suffix


def _preamble(render, user_prefix: str) -> str:
    """Text the template puts before a lone user turn beyond the user prefix (e.g. a default system prompt)."""
    alone = render([{"role": "user", "content": _SENTINEL}]).split(_SENTINEL, 1)[0]
    return alone[: -len(user_prefix)] if user_prefix and alone.endswith(user_prefix) else ""


def _renderer(source: str, special_tokens: dict):
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # jinja2 is a base dependency; say so if it was removed
        raise ImportError("sgl_lang needs jinja2 to use a model's chat template: pip install jinja2") from e

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)
    tokens = {"bos_token": "", "eos_token": "", **special_tokens}

    def render(messages: list) -> str:
        return template.render(messages=messages, add_generation_prompt=False, **tokens)

    return render
