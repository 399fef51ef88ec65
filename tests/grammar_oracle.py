"""An independent viability oracle for grammar tests, built only from lark and `regex`.

`lark_viable(parser, text)`: some split text = head + rest has head lexed and parsed by lark's
own interactive parser (contextual lexer) without error, and rest empty or a prefix of a
token the parser accepts next (checked with `regex` partial matching on the terminal's regex).
"""

from __future__ import annotations

import lark
import regex
from lark.exceptions import LarkError


def _parsed(parser: lark.Lark, head: str):
    try:
        ip = parser.parse_interactive(head)
        ip.exhaust_lexer()
        return ip
    except LarkError:
        return None


def _partial_token(parser: lark.Lark, ip, rest: str) -> bool:
    names = set(ip.accepts()) | set(parser.ignore_tokens)
    names.discard("$END")
    for name in names:
        pattern = parser.get_terminal(name).pattern.to_regexp()
        if regex.fullmatch(pattern, rest, partial=True):
            return True
    return False


def lark_viable(parser: lark.Lark, text: str) -> bool:
    """Whether `text` can be continued into a sentence lark parses (see the module docstring)."""
    for k in range(len(text), -1, -1):
        ip = _parsed(parser, text[:k])
        if ip is None:
            continue
        rest = text[k:]
        if not rest or _partial_token(parser, ip, rest):
            return True
    return False


def lark_parses(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except LarkError:
        return False
