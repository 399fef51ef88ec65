"""Open arrays whose items the grammar engine tracks: unique items, and item counts the rules leave out.

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
from sgl_runtime.constrained.grammar.unique_values import continuations, repeats

NOTHING_SEEN: frozenset = frozenset()
OPEN, ITEM, CLOSE = "open", "item", "close"  # the marked rules of an array whose items must be unique
OPEN_VALUES = "open values"  # OPEN for items compared as JSON values (unique_values), not as text


@dataclass(frozen=True)
class Opener:
    """What an array's opening mark asks: `unique` None (items only counted), "text" or "values";
    `high` the most items (None: the rules bound them)."""

    unique: Optional[str] = "text"
    high: Optional[int] = None


OPENERS = {OPEN: Opener("text"), OPEN_VALUES: Opener("values")}


def opener(mark) -> Optional[Opener]:
    """The Opener a mark stands for (None for ITEM and CLOSE)."""
    return mark if isinstance(mark, Opener) else OPENERS.get(mark)


def at_bound(frame: tuple) -> bool:
    """Whether the item being read (or the next) is the last its array may take."""
    high = frame[2].high
    return high is not None and frame[3] + 1 >= high


def affects_masks(frame: tuple) -> bool:
    """Whether masks depend on the frame (beyond the parser state): unique items, or the last item."""
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
                if item is None:
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
        else:
            out.append((NOTHING_SEEN, b"", opener(event), 0))
    return tuple(out)


def firsts(frame: tuple, token: bytes) -> Optional[set]:
    """The bytes that go on along an earlier item which the frame's current item (its text so far
    + `token`) may still become; None when it can become none of them (or is between items, or the
    array's items need not be unique)."""
    seen, item, op, _ = frame
    if item is None or not seen or op.unique is None:
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
