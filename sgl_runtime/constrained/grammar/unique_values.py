"""Items of a unique array compared as JSON values, for items a value of which has many spellings.

Where an item may be an object whose keys come in any order (free-form values, patternProperties,
key_order "any"), equal text is not equal value: `{"a":1,"b":2}` and `{"b":2,"a":1}` are the same
item. Such arrays (`OPEN_VALUES` in `GrammarEngine.unique_rules`) keep each item's text, as the
textual ones do, and compare an ending item with the earlier ones by value (`repeats`).

Masks must also leave out the tokens after which an item can only end as a repeat, so the engine
needs to know how the item read so far may still continue as an earlier item: `continuations`
lists those continuations, byte strings up to a length, over every spelling of every earlier item.
The spellings are those of compact JSON whose scalars have one spelling each (as the JSON Schema
grammar form writes them), with object keys in any order: reading the item's text picks the key
of each member it has begun (a key's text is never a prefix of another's), so only the members
still unwritten branch.

An object is the multiset of its members, as the grammar counts them (minProperties, maxProperties):
an object that writes a key twice is not the object with one of them (RFC 8259 leaves the meaning
of repeated keys open; Python's json keeps the last one).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from decimal import Decimal
from typing import Callable, Optional

MAX_CONTINUATIONS = 4096  # continuations one listing may return (beyond: None, the caller checks more)
MAX_STEPS = 65536  # pending parts one listing may expand (beyond: None as well)


class _Number(str):
    """A number's text, as the item spelled it."""


class _Members(list):
    """An object's (key, value) pairs, in the item's order."""


@functools.lru_cache(maxsize=65536)
def _parse(text: bytes):
    """(spelling tree, value key) of one item's text; None if it is not JSON."""
    try:
        raw = json.loads(text, parse_int=_Number, parse_float=_Number, object_pairs_hook=_Members)
    except (ValueError, RecursionError):
        return None
    return _tree(raw), _key(raw)


def _tree(v):
    """("t", bytes) for a scalar's text, ("a", items) for an array, ("o", ((key text, value), ...))."""
    if isinstance(v, _Members):
        return ("o", tuple((_spell(k), _tree(x)) for k, x in v))
    if isinstance(v, list):
        return ("a", tuple(_tree(x) for x in v))
    if isinstance(v, _Number):
        return ("t", v.encode())
    return ("t", _spell(v))


def _spell(v) -> bytes:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode()


def _key(v):
    """A hashable key equal for equal JSON values (objects as sets of members, numbers by value)."""
    if isinstance(v, _Members):  # the multiset of its members (a key written twice is two members)
        return ("o", frozenset(Counter((k, _key(x)) for k, x in v).items()))
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, _Number):
        return ("n", Decimal(v))
    return (type(v).__name__, v)


def repeats(seen: frozenset, item: bytes) -> bool:
    """Whether the item spelled `item` equals (as a JSON value) an earlier one spelled in `seen`."""
    if item in seen:
        return True
    parsed = _parse(item)
    if parsed is None:
        return False
    key = parsed[1]
    return any(p is not None and p[1] == key for p in map(_parse, seen))


def continuations(seen: frozenset, text: bytes, limit: int, keep: Optional[Callable] = None) -> Optional[set]:
    """The byte strings (each `limit` bytes, or fewer where the item then ends) that continue `text`
    into a spelling of an earlier item in `seen`; b"" where `text` spells one already. Empty when
    `text` can become none of them; None when there are more than MAX_CONTINUATIONS. `keep(bytes)`:
    whether to go on past a continuation so far (e.g. whether some token begins with it); one it
    stops is listed as it is."""
    out: set = set()
    steps = [MAX_STEPS]
    for word in seen:
        parsed = _parse(word)
        if parsed is None:
            if word.startswith(text):
                out.add(word[len(text) : len(text) + limit])
            continue
        for pending in _read(parsed[0], text):
            if not _extend(pending, limit, out, steps, keep):
                return None
    return out


# A spelling still to write is a linked list (head, rest) of pending parts: ("t", bytes) text,
# ("a", items) / ("o", members) a whole value, ("m", members left, first) an object's remaining
# members and its `}`.


def _read(tree, text: bytes) -> list:
    """The pending spellings of `tree` once `text` is read (one per way of reading it: more than
    one only where `text` ends inside an object's next key, or where a key repeats); [] when
    `text` leaves every spelling of it."""
    out: list = []
    n = len(text)
    ways = [((tree, None), 0)]
    while ways:
        todo, i = ways.pop()
        while i < n:
            if todo is None:
                break  # the text goes on past the item
            part, todo = todo
            kind = part[0]
            if kind == "t":
                chunk = part[1]
                m = min(len(chunk), n - i)
                if text[i : i + m] != chunk[:m]:
                    break
                i += m
                if m < len(chunk):
                    out.append((("t", chunk[m:]), todo))
                    break
            elif kind != "m" or not part[1]:
                todo = _open(part, todo)
            else:
                for head, after in _next_members(part, todo):
                    m = min(len(head), n - i)
                    if text[i : i + m] == head[:m]:
                        if m == len(head):
                            ways.append((after, i + m))  # one way, unless the item repeats this key
                        else:
                            out.append((("t", head[m:]), after))
                break
        else:
            out.append(todo)
    return out


def _open(part, rest):
    """The pending parts of a whole array or object `part` (or of the `}` of an object with no
    members left), followed by `rest`."""
    if part[0] == "m":
        return ("t", b"}"), rest
    if part[0] == "o":
        return ("t", b"{"), (("m", part[1], True), rest)
    items = part[1]
    rest = ("t", b"]"), rest
    for k in range(len(items) - 1, -1, -1):
        rest = items[k], rest
        if k:
            rest = ("t", b","), rest
    return ("t", b"["), rest


def _next_members(part, rest):
    """(key text with its `,` and `:`, the pending parts after it) for each member that an object's
    remaining members `part` may write next."""
    left, first = part[1], part[2]
    for k, (key, value) in enumerate(left):
        yield (b"" if first else b",") + key + b":", (value, (("m", left[:k] + left[k + 1 :], False), rest))


def _extend(pending, limit: int, out: set, steps: list, keep=None) -> bool:
    """Add to `out` every continuation of `pending` cut at `limit` bytes (or where `keep` says
    no); False past the caps."""
    todo = [(pending, b"")]
    while todo:
        pending, acc = todo.pop()
        while True:
            steps[0] -= 1
            if steps[0] < 0:
                return False
            if pending is None or len(acc) >= limit or (keep is not None and acc and not keep(acc)):
                out.add(acc[:limit])
                if len(out) > MAX_CONTINUATIONS:
                    return False
                break
            part, pending = pending
            kind = part[0]
            if kind == "t":
                acc += part[1]
            elif kind != "m" or not part[1]:
                pending = _open(part, pending)
            else:
                for head, after in _next_members(part, pending):
                    todo.append(((("t", head), after), acc))
                break
    return True
