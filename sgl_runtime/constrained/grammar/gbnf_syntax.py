r"""Parses GBNF (the llama.cpp / XGrammar EBNF that SGLang's `ebnf` parameter takes) into an AST.

    root   ::= "{" ws pair ("," ws pair)* "}"   # rules, literals, comments
    pair   ::= [a-z]+ ":" ws [0-9]{1,3}          # classes, ranges, {m}, {m,}, {m,n}, ? * +
    ws     ::= [ \t\n]*                          # [^...] negation, . any character

The syntax itself is read by lark (`GBNF_SYNTAX` below); literals and classes are decoded here
(escapes \n \t \r \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH). Every error is a
`ConstraintError` naming the line and column. The AST nodes are frozen dataclasses over code
points; `gbnf_lower` turns them into the grammar engine's lark grammar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

import lark
from lark.exceptions import (
    LarkError,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)

from sgl_runtime.constrained.errors import ConstraintError

MAX_CODE_POINT = 0x10FFFF
MAX_REPEAT = 10_000

GBNF_SYNTAX = r"""
start: rule+
rule: RULE_START alternatives
alternatives: sequence ("|" sequence)*
sequence: item*
item: atom quantifier?
?atom: STRING -> literal
     | CLASS -> char_class
     | NAME -> ref
     | "." -> any_char
     | "(" alternatives ")" -> group
quantifier: QUANT -> star_plus_opt
          | "{" INT "}" -> exactly
          | "{" INT "," "}" -> at_least
          | "{" INT "," INT "}" -> between

RULE_START.2: /[A-Za-z_][A-Za-z0-9_\-]*\s*::=/
NAME: /[A-Za-z_][A-Za-z0-9_\-]*/
STRING: /"(?:[^"\\\n]|\\.)*"/
CLASS: /\[(?:[^\]\\\n]|\\.)*\]/
QUANT: /[*+?]/
INT: /[0-9]+/
COMMENT: /#[^\n]*/
%ignore COMMENT
%ignore /\s+/
"""


@dataclass(frozen=True)
class Chars:
    """One character from a set of inclusive code point ranges (sorted, disjoint)."""

    ranges: tuple


@dataclass(frozen=True)
class Seq:
    items: tuple


@dataclass(frozen=True)
class Alt:
    options: tuple


@dataclass(frozen=True)
class Repeat:
    body: Node
    low: int
    high: int | None  # None: unbounded


@dataclass(frozen=True)
class Ref:
    name: str
    line: int
    column: int


Node = Union[Chars, Seq, Alt, Repeat, Ref]  # noqa: UP007 (a runtime alias)


@dataclass(frozen=True)
class GbnfGrammar:
    rules: dict  # name -> Node, in source order
    root: str = "root"


def looks_like_gbnf(text: str) -> bool:
    """Whether `text` starts its first rule the GBNF way (`name ::=`) rather than lark's (`name:`)."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "//")):
            continue
        return re.match(r"[A-Za-z_][A-Za-z0-9_\-]*\s*::=", stripped) is not None
    return False


def parse_gbnf(text: str) -> GbnfGrammar:
    """The AST of GBNF `text`; ConstraintError (with line and column) if it is not valid GBNF."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError("invalid GBNF grammar: empty")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise ConstraintError(
            f"invalid GBNF grammar at line {exc.line} column {exc.column}: {_describe(exc, text)}"
        ) from None
    except LarkError as exc:
        raise ConstraintError(f"invalid GBNF grammar: {exc}") from None
    rules: dict = {}
    for rule in tree.children:
        head, body = rule.children
        name = head.value[:-3].strip()
        if name in rules:
            raise ConstraintError(
                f"invalid GBNF grammar at line {head.line} column {head.column}: rule {name!r} is defined twice"
            )
        rules[name] = _node(body)
    if "root" not in rules:
        raise ConstraintError("invalid GBNF grammar: no `root ::= ...` rule (the start rule)")
    for node in rules.values():
        for ref in _refs(node):
            if ref.name not in rules:
                raise ConstraintError(
                    f"invalid GBNF grammar at line {ref.line} column {ref.column}: "
                    f"rule {ref.name!r} is used but never defined"
                )
    return GbnfGrammar(rules)


def refs_of(node: Node) -> set[str]:
    """Names of the rules `node` refers to."""
    return {r.name for r in _refs(node)}


# ---- private ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    return lark.Lark(GBNF_SYNTAX, parser="lalr", propagate_positions=True)


def _describe(exc: UnexpectedInput, text: str) -> str:
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character {text[exc.pos_in_stream]!r}"
    if isinstance(exc, UnexpectedEOF):
        return "unexpected end of grammar"
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            return "unexpected end of grammar (an unclosed group or a rule without a body?)"
        expected = sorted(exc.expected)
        return f"unexpected {exc.token.value!r}, expected one of {', '.join(expected)}"
    return str(exc).splitlines()[0]


def _node(tree) -> Node:
    kind = tree.data
    if kind == "alternatives":
        options = tuple(_node(c) for c in tree.children)
        return options[0] if len(options) == 1 else Alt(options)
    if kind == "sequence":
        items = tuple(_node(c) for c in tree.children)
        return items[0] if len(items) == 1 else Seq(items)
    if kind == "item":
        atom = _node(tree.children[0])
        return atom if len(tree.children) == 1 else _quantified(atom, tree.children[1])
    if kind == "group":
        return _node(tree.children[0])
    if kind == "any_char":
        return Chars(((0, MAX_CODE_POINT),))
    token = tree.children[0]
    if kind == "ref":
        return Ref(token.value, token.line, token.column)
    if kind == "literal":
        return Seq(tuple(Chars(((cp, cp),)) for cp in _decode(token.value[1:-1], token)))
    return _char_class(token)


def _quantified(atom: Node, quant) -> Node:
    kind, values = quant.data, [int(t.value) for t in quant.children if t.type == "INT"]
    if kind == "star_plus_opt":
        low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[quant.children[0].value]
    elif kind == "exactly":
        low = high = values[0]
    elif kind == "at_least":
        low, high = values[0], None
    else:
        low, high = values
    where = quant.meta
    if high is not None and high < low:
        raise ConstraintError(
            f"invalid GBNF grammar at line {where.line} column {where.column}: "
            f"repetition {{{low},{high}}} has its maximum below its minimum"
        )
    if max(low, high or 0) > MAX_REPEAT:
        raise ConstraintError(
            f"invalid GBNF grammar at line {where.line} column {where.column}: repetition bound over {MAX_REPEAT}"
        )
    return Repeat(atom, low, high)


_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "[": "[",
    "]": "]",
    "-": "-",
    "^": "^",
    "/": "/",
    "0": "\0",
}
_HEX = {"x": 2, "u": 4, "U": 8}


def _decode(body: str, token) -> list[int]:
    """Code points of a literal's or class's body, escapes decoded."""
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ord(ch))
            i += 1
            continue
        esc = body[i + 1]
        if esc in _HEX:
            digits = body[i + 2 : i + 2 + _HEX[esc]]
            if len(digits) != _HEX[esc] or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise _token_error(token, f"\\{esc} needs {_HEX[esc]} hex digits")
            cp = int(digits, 16)
            if cp > MAX_CODE_POINT or 0xD800 <= cp <= 0xDFFF:
                raise _token_error(token, f"\\{esc}{digits} is not a Unicode scalar value")
            out.append(cp)
            i += 2 + _HEX[esc]
        elif esc in _ESCAPES:
            out.append(ord(_ESCAPES[esc]))
            i += 2
        else:
            raise _token_error(token, f"unknown escape \\{esc}")
    return out


def _char_class(token) -> Chars:
    """A `[...]` class: items and `a-b` ranges, negated by a leading `^`."""
    body = token.value[1:-1]
    negated = body.startswith("^")
    if negated:
        body = body[1:]
    marks = _decode_marked(body, token)  # [(code point, was it an unescaped '-')]
    ranges, i = [], 0
    while i < len(marks):
        cp = marks[i][0]
        if i + 2 < len(marks) and marks[i + 1][1]:
            hi = marks[i + 2][0]
            if hi < cp:
                raise _token_error(token, f"range {chr(cp)!r}-{chr(hi)!r} is reversed")
            ranges.append((cp, hi))
            i += 3
        else:
            ranges.append((cp, cp))
            i += 1
    if not ranges and not negated:
        raise _token_error(token, "empty character class []")
    merged = _merge(ranges)
    return Chars(_complement(merged) if negated else merged)


def _decode_marked(body: str, token) -> list[tuple[int, bool]]:
    """Decoded class items, each flagged when it is a bare '-' (a range operator candidate)."""
    marks, i = [], 0
    while i < len(body):
        if body[i] == "\\":
            j = i + 2 + _HEX.get(body[i + 1], 0)
            marks.append((_decode(body[i:j], token)[0], False))
            i = j
        else:
            marks.append((ord(body[i]), body[i] == "-"))
            i += 1
    return marks


def _merge(ranges: list) -> tuple:
    out: list = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _complement(ranges: tuple) -> tuple:
    out, start = [], 0
    for lo, hi in ranges:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return tuple(out)


def _token_error(token, why: str) -> ConstraintError:
    return ConstraintError(f"invalid GBNF grammar at line {token.line} column {token.column}: {why}")


def _refs(node: Node):
    if isinstance(node, Ref):
        yield node
    elif isinstance(node, (Seq, Alt)):
        for child in node.items if isinstance(node, Seq) else node.options:
            yield from _refs(child)
    elif isinstance(node, Repeat):
        yield from _refs(node.body)
