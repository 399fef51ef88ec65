"""Whether an open unique array's item (or an object's key) can still end as something new.

`repeats_only(engine, state, budget)` is the part of `GrammarEngine.viable` that reads a state's
frames (grammar/frames.py): once the text of the item being read is a prefix of earlier items'
texts only, the state is viable only if some byte leads off them to a viable text. The check
walks along those texts' bytes, trying at each step the bytes that lead off them, within `budget`
scalar steps (beyond it the prefix counts as a dead end).
"""

from __future__ import annotations

from typing import Optional

from sgl_runtime.constrained.grammar.frames import firsts, is_keys, key_firsts
from sgl_runtime.constrained.grammar.lexer import CLOSE_BEFORE, DEAD

ESCAPE_FEEDS = 20_000  # scalar steps one repeat check may take (beyond: the prefix counts as a dead end)


def repeats_only(engine, state, budget: list) -> bool:
    """Whether an open unique array's current item can now only end as one of its earlier
    items (its text is a prefix of theirs and no byte leads off them to a viable text)."""
    for j, frame in enumerate(state.frames):
        ahead = firsts(frame, state.token)
        if ahead is not None and not _escapes(engine, state, j, ahead, budget):
            return True
    j = engine.key_frame(state)
    if j >= 0:
        ahead = key_firsts(state.frames[j][0], state.token)
        if ahead is not None and not _escapes(engine, state, j, ahead, budget):
            return True
    return False


def _item_firsts(engine, state, j: int) -> Optional[set]:
    """`firsts` of frame j in `state` (an object's: its keys, where a key is being read)."""
    frame = state.frames[j]
    if not is_keys(frame):
        return firsts(frame, state.token)
    return key_firsts(frame[0], state.token) if engine.key_frame(state) == j else None


def _escapes(engine, state, j: int, ahead: set, budget: list) -> bool:
    """Whether frame j's item can leave the earlier items it may still become (`firsts`: the
    bytes that go on along one): a depth-first walk along their bytes, trying at each step the
    bytes that lead off them (one per byte class where the class decides alone) for a viable
    state."""
    seen = state.frames[j][0]
    todo = [(state, ahead)]
    while todo:
        s, ahead = todo.pop()
        for b in _probe_bytes(engine, s, ahead):
            budget[0] -= 1
            if budget[0] < 0:
                return False
            for nxt in engine.feed_all(s, bytes((b,))):
                frames = nxt.frames
                ended = len(frames) <= j or frames[j][0] is not seen
                if ended or (frames[j][1] is None and not is_keys(frames[j])):
                    if engine.viable(nxt, budget):  # the item ended, and not as an earlier one
                        return True
                    continue
                more = _item_firsts(engine, nxt, j)
                if more is None:
                    if engine.viable(nxt, budget):
                        return True
                elif b in ahead:
                    todo.append((nxt, more))
    return False


def _probe_bytes(engine, state, firsts: set) -> list:
    """The bytes to try from `state`: those in `firsts`, and of the others one per lexer byte
    class that continues or closes the token here (all of a class that closes before it,
    since the next context lexes that byte again); the bytes off the earlier items first."""
    ctx = engine.context(state.stack)
    key = (id(ctx), state.lex)
    probes = engine.probes.get(key)
    if probes is None:
        row = ctx.rows[state.lex] or ctx.build_row(state.lex)
        codes, classes = row[0], ctx.class_list
        live = [b for b in range(256) if codes[classes[b]] != DEAD]
        by_class: dict = {}
        for b in live:
            by_class.setdefault(classes[b], []).append(b)
        probes = (frozenset(live), [(bs, codes[c] == CLOSE_BEFORE) for c, bs in by_class.items()])
        if len(engine.probes) > 65536:
            engine.probes.clear()
        engine.probes[key] = probes
    live, groups = probes
    out = []
    for members, each in groups:
        off = [b for b in members if b not in firsts]
        out.extend(off if each else off[:1])
    return out + [b for b in firsts if b in live]
