"""An independent viability oracle for grammar tests, built only from lark and `regex`.

`lark_viable(parser, text)`: some split text = head + rest, at a token boundary of lark's own
lexing of text, has head lexed and parsed by lark's interactive parser (contextual lexer)
without error, and rest empty or a prefix of a
token the parser accepts next (checked with `regex` partial matching on the terminal's regex;
a lazy terminal that already matched a shorter prefix of rest ends there, as in lark's lexer).
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
        if not regex.fullmatch(pattern, rest, partial=True):
            continue
        shorter = regex.match(pattern, rest)
        if any(q in pattern for q in ("*?", "+?", "??")) and shorter and shorter.end() < len(rest):
            continue  # a lazy terminal ends at its first match, whatever follows
        return True
    return False


def _boundaries(parser: lark.Lark, text: str) -> set[int]:
    """Token boundaries lark's own lexer puts in `text` (up to where it fails)."""
    bounds = {0, len(text)}
    try:
        for tok in parser.parse_interactive(text).iter_parse():
            bounds.update((tok.start_pos, tok.end_pos))
    except LarkError:
        pass
    for pos in sorted(bounds):  # ignored tokens (blanks, comments) end boundaries too
        while pos < len(text):
            ends = [
                regex.match(parser.get_terminal(n).pattern.to_regexp(), text, pos=pos) for n in parser.ignore_tokens
            ]
            ends = [m.end() for m in ends if m and m.end() > pos]
            if not ends:
                break
            pos = ends[0]
            bounds.add(pos)
    return bounds


def lark_viable(parser: lark.Lark, text: str) -> bool:
    """Whether `text` can be continued into a sentence lark parses (see the module docstring)."""
    bounds = _boundaries(parser, text)
    for k in range(len(text), -1, -1):
        if k not in bounds:
            continue  # lark would not end a token here (e.g. "a" | "1" inside the name "a1")
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
