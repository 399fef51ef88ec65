"""Open arrays and objects whose members the grammar engine tracks: unique items, item counts the
rules leave out, and the keys of objects (no key twice).

The grammar marks three rules of such an array (`GrammarEngine.unique_rules`): an empty one right
after `[` (its `Opener`: a new array), one around each item (ITEM: an item ends), and the array's
own (CLOSE: it closes). A frame is (texts of the items seen, text of the item being read or None
between items, the array's Opener, the number of items ended). Items of a unique array are kept
and compared as text (each value has one spelling) or as JSON values (unique_values.py); an array
with a `high` bound (`maxItems` beyond what grammar rules can spell out position by position)
rejects the separator after its last allowed item (exact where the separator token closes at its
`,`, as in compact JSON: the parser then shifts it as soon as it is read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sgl_runtime.constrained.grammar.parser import SHIFT
from sgl_runtime.constrained.grammar.refine import PIECE_RULE
from sgl_runtime.constrained.grammar.unique_values import continuations, repeats

NOTHING_SEEN: frozenset = frozenset()
OPEN, ITEM, CLOSE = "open", "item", "close"  # the marked rules of an array whose items must be unique
OPEN_VALUES = "open values"  # OPEN for items compared as JSON values (unique_values), not as text
KEY = "key"  # an empty rule right before an object's key token (its frame's next shift is the key)
PENDING = b""  # a keys frame's item between KEY and the key token's shift


@dataclass(frozen=True)
class Opener:
    """What an array's opening mark asks: `unique` None (items only counted), "text" or "values";
    `high` the most items (None: the rules bound them)."""

    unique: Optional[str] = "text"
    high: Optional[int] = None


KEYS = Opener("keys")  # an object's opening mark: its keys are tracked
OPENERS = {OPEN: Opener("text"), OPEN_VALUES: Opener("values")}


def opener(mark) -> Optional[Opener]:
    """The Opener a mark stands for (None for ITEM and CLOSE)."""
    return mark if isinstance(mark, Opener) else OPENERS.get(mark)


def is_keys(frame: tuple) -> bool:
    """Whether the frame is an object's (its keys tracked), not an array's."""
    return frame[2].unique == "keys"


def at_bound(frame: tuple) -> bool:
    """Whether the item being read (or the next) is the last its array may take."""
    high = frame[2].high
    return high is not None and frame[3] + 1 >= high


def affects_masks(frame: tuple) -> bool:
    """Whether masks depend on an array's frame (beyond the parser state): unique items, or the
    last item. (An object's frame matters where a key may be read: GrammarEngine.frames_matter.)"""
    return frame[2].unique is not None or at_bound(frame)


def after(frames: tuple, events: tuple, text: bytes) -> Optional[tuple]:
    """Frames after a token spelled `text` is shifted with these marked reductions around it (None:
    an item repeats an earlier one of its array, or one more than `high` begins). The token's text
    goes to every item being read of a unique array; a frame between items (after an item, at its
    `,` or `]`) starts the next."""
    out = list(frames)
    for event in events:
        if event is SHIFT:
            for k, (seen, item, op, count) in enumerate(out):
                if op.unique == "keys":
                    if item is not None:  # PENDING: this is the key token itself
                        key = key_text(text)
                        if key in seen:
                            return None
                        out[k] = (seen | {key}, None, op, count + 1)
                elif item is None:
                    if op.high is not None and count >= op.high and b"," in text:
                        return None
                    out[k] = (seen, b"", op, count)
                elif op.unique is not None:
                    out[k] = (seen, item + text, op, count)
        elif event == ITEM:
            seen, item, op, count = out[-1]
            if op.unique == "values" and repeats(seen, item) or op.unique == "text" and item in seen:
                return None
            if op.high is not None and count >= op.high:
                return None
            out[-1] = (seen | {item} if op.unique is not None else seen, None, op, count + 1)
        elif event == CLOSE:
            out.pop()
        elif event == KEY:
            seen, _, op, count = out[-1]
            out[-1] = (seen, PENDING, op, count)
        else:
            op = opener(event)
            out.append((NOTHING_SEEN, None if op.unique == "keys" else b"", op, 0))
    return tuple(out)


def firsts(frame: tuple, token: bytes) -> Optional[set]:
    """The bytes that go on along an earlier item which the frame's current item (its text so far
    + `token`) may still become; None when it can become none of them (or is between items, or the
    array's items need not be unique)."""
    seen, item, op, _ = frame
    if item is None or not seen or op.unique is None or op.unique == "keys":
        return None
    text = item + token
    if op.unique == "values":
        ahead = continuations(seen, text, 1)
        return None if not ahead else {w[0] for w in ahead if w}  # (never past the cap at 1 byte)
    rests = [w[len(text) :] for w in seen if w.startswith(text)]
    return {w[0] for w in rests if w} if rests else None


def rests(frame: tuple, text: bytes, longest: int, keep=None):
    """What each earlier item the current one (`text` so far) may still become has left, cut at
    `longest` bytes or where `keep` says no (None when there are too many to list)."""
    seen, _, op, _ = frame
    if op.unique == "values":
        return continuations(seen, text, longest, keep)
    return {w[len(text) : len(text) + longest] for w in seen if w.startswith(text)}


WHITESPACE = frozenset(b" \t\n\r")
BEFORE_KEY = WHITESPACE | {ord(",")}  # what a key token may hold before the key's opening quote
AFTER_KEY = WHITESPACE | {ord(":")}  # and after its closing quote


def key_types(rules, marks: dict, type_index: dict) -> int:
    """Bitset of the token types that follow a KEY rule in some lark rule: the key tokens of the
    objects whose keys are tracked."""
    keys, bits = {name for name, kind in marks.items() if kind == KEY}, 0
    pieces: dict = {}  # a key terminal split into pieces (grammar/refine.py): its rule -> the pieces
    for rule in rules if keys else ():
        if rule.origin.name.startswith(PIECE_RULE):
            pieces.setdefault(rule.origin.name, []).extend(getattr(sym, "name", sym) for sym in rule.expansion)
    for rule in rules if keys else ():
        names = [getattr(sym, "name", sym) for sym in rule.expansion]
        for a, b in zip(names, names[1:]):
            if a in keys:
                for name in pieces.get(b, [b]):
                    if name in type_index:
                        bits |= 1 << type_index[name]
    return bits


def key_text(token: bytes) -> bytes:
    """The quoted key of a key token `[,] "key" :` (whitespace around)."""
    return token[token.index(b'"') : token.rindex(b'"') + 1]


def key_firsts(seen: frozenset, token: bytes) -> Optional[set]:
    """The bytes that go on along an earlier key of an object which the key token read so far
    (`token`) may still become; None when it can become none of them (or is no key's beginning)."""
    if not seen:
        return None
    start = token.find(b'"')
    if start < 0:
        return set(BEFORE_KEY) | {ord('"')} if all(b in BEFORE_KEY for b in token) else None
    if not all(b in BEFORE_KEY for b in token[:start]):
        return None
    end = closing_quote(token, start)
    if end is not None:
        if token[start : end + 1] in seen and all(b in AFTER_KEY for b in token[end + 1 :]):
            return set(AFTER_KEY)
        return None
    text = token[start:]
    ahead = {k[len(text)] for k in seen if k.startswith(text)}
    return ahead or None


def closing_quote(token: bytes, start: int) -> Optional[int]:
    """The index of the quote closing the JSON string opened at `start`, or None if it is open."""
    i = start + 1
    while i < len(token):
        if token[i] == 0x5C:  # backslash: the next byte is escaped
            i += 2
            continue
        if token[i] == 0x22:
            return i
        i += 1
    return None
