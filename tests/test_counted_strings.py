"""Long strings as counted automata (counted.py, json_schema/long_strings.py): the same language
and the same live prefixes as the flat string automaton, exact for any bound (periodic count
sets), and in the grammar form the same token masks as the flat automaton and the same verdicts
as jsonschema."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from tiny_vocab import make_vocab, mask_bits

from sgl_runtime.constrained.automata import to_interegular
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.counted import CountedDFA, CountedSlot
from sgl_runtime.constrained.json_schema.compiler import schema_to_fsm
from sgl_runtime.constrained.json_schema.language import compile_schema, schema_to_grammar
from sgl_runtime.constrained.json_schema.strings import counted_string, string_dfa

ALPHABET = ["a", "b", "c", "z", '"', "\\", "\n", "\x0b", "\u00e9", "\u20ac", "\U0001f600", "/"]
BOUNDS = [
    (0, 3, ()),
    (2, 5, ()),
    (1, 4, ("^[a-c]+$",)),
    (0, 6, ("ab",)),
    (3, None, ("^(ab)*$",)),
    (0, 7, ("^(ab)*$",)),
    (2, 6, ("[\u00e9\u20ac]",)),
    (4, 4, ()),
]


def _texts(rng: random.Random, n: int, max_len: int = 9):
    for i in range(n):
        pieces = ALPHABET if i % 2 else ["ab", "a", "c", "\u00e9", "\u20ac"]  # every other text likelier to match
        s = "".join(rng.choice(pieces) for _ in range(rng.randrange(max_len)))
        literal = json.dumps(s, ensure_ascii=False).encode()
        yield s, literal
        yield None, literal[:-1]
        yield None, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5)))
        yield None, literal.replace(b"\\u000b", b"\\u000B")  # not the canonical spelling


@pytest.mark.parametrize("lo,hi,patterns", BOUNDS)
def test_counted_strings_accept_what_the_flat_string_automaton_accepts(lo, hi, patterns):
    counted = counted_string(lo, hi, patterns)
    flat = ByteDFA.from_fsm(to_interegular(string_dfa(lo, hi, patterns, (), True)))
    rng = random.Random(f"{lo}{hi}{patterns}")
    accepted = 0
    for _, data in _texts(rng, 1500):
        assert counted.accepts(data) == flat.accepts(data), data
        accepted += counted.accepts(data)
    assert accepted >= 10


@pytest.mark.parametrize("lo,hi,patterns", BOUNDS)
def test_counted_slot_states_are_live_exactly_where_the_flat_automaton_is(lo, hi, patterns):
    slot = CountedSlot(counted_string(lo, hi, patterns), token_type=5)
    flat = ByteDFA.from_fsm(to_interegular(string_dfa(lo, hi, patterns, (), True)))  # pruned: live states only
    rng = random.Random(f"slot{lo}{hi}{patterns}")
    for _, data in _texts(rng, 600):
        q, f = slot.initial, flat.initial
        for byte in data:
            q, f = slot.trans[q][byte], int(flat.transitions[f, byte])
            assert (q >= 0) == (f >= 0), data
            if q < 0:
                break
            assert (slot.label[q] == 5) == bool(flat.accepting[f]), data
            assert slot.reach_bits(q) == 1 << 5 and (slot.live[q] or slot.label[q] == 5)


def test_huge_and_unbounded_counts_follow_the_period_of_the_count_sets():
    even = counted_string(1001, None, ("^(ab)*$",))
    assert even.accepts(json.dumps("ab" * 501).encode())
    assert not even.accepts(json.dumps("ab" * 500).encode())  # 1000 < minLength
    assert not even.accepts(json.dumps("ab" * 600 + "a").encode())
    huge = counted_string(0, 2**31, ("^(ab)*$",))
    assert huge.levels.shape[0] <= 4 and huge.period is not None  # no level per count
    assert huge.accepts(json.dumps("ab" * 4000).encode())
    assert not huge.accepts(json.dumps("ab" * 4000 + "a").encode())
    tight = counted_string(3, 3, ("^(ab)*$",))
    assert tight.is_empty()  # every value has an even length
    with pytest.raises(Exception, match="empty"):
        CountedSlot(tight, 0)
    slot = CountedSlot(even, 1)  # counts past minLength share states without an upper bound
    q = slot.initial
    for byte in json.dumps("ab" * 1500)[:-1].encode():
        q = slot.trans[q][byte]
    assert q >= 0 and len(slot._keys) < 2100
    assert slot.label[slot.trans[q][ord('"')]] == 1


def _same_for(slot: CountedSlot, q: int, r: int, depth: int, alphabet) -> bool:
    """Whether every path of at most `depth` bytes from q and from r meets the same labels and dies alike."""
    layer = {(q, r)}
    for _ in range(depth):
        nxt = set()
        for a, b in layer:
            for byte in alphabet:
                x, y = slot.trans[a][byte], slot.trans[b][byte]
                if (x >= 0) != (y >= 0) or (x >= 0 and slot.label[x] != slot.label[y]):
                    return False
                if x >= 0:
                    nxt.add((x, y))
        layer = nxt
    return True


def test_representative_counts_behave_like_theirs_for_horizon_bytes():
    """CountedSlot.fold's contract on random counted automata (odd periods, counts whose phase the
    automaton state does not carry, bounds close together): the next `horizon` bytes from a state
    and from the one it folds to meet the same labels and deaths, and the shift it gives unfolds
    back to the state."""
    rng = np.random.default_rng(1)
    merged = periodic = 0
    for trial in range(60):
        m = int(rng.integers(2, 6))
        table = rng.integers(-1, m, size=(m, 256)).astype(np.int32)
        table[:, 3:] = -1
        counted = rng.random((m, 256)) < 0.6
        if trial % 2:  # a counted cycle entered with or without a count: its phase is not in the state
            m = int(rng.integers(3, 7))
            table = np.full((m, 256), -1, dtype=np.int32)
            counted = np.ones((m, 256), dtype=bool)
            table[1:, 0] = np.arange(2, m + 1) % m + (np.arange(2, m + 1) == m)  # 1 -> 2 -> ... -> m-1 -> 1
            table[0, :2], counted[0, 1] = 1, False
            accepting = np.zeros(m, dtype=bool)
            accepting[rng.choice(np.arange(1, m), size=int(rng.integers(1, m - 1)), replace=False)] = True
        accepting = rng.random(m) < 0.5
        if trial % 5 == 4:  # forward edges only (a pattern of bounded length): counts with room below hi merge
            m = int(rng.integers(3, 9))
            table = np.full((m, 256), -1, dtype=np.int32)
            table[:, :3] = rng.integers(-1, m, size=(m, 3))
            table[:, :3] = np.where(table[:, :3] > np.arange(m)[:, None], table[:, :3], -1)
            counted = rng.random((m, 256)) < 0.6
            accepting = rng.random(m) < 0.5
        lo = int(rng.integers(12, 30))
        hi = [None, lo + int(rng.integers(0, 3)), lo + 40][trial % 3]
        if trial % 5 == 4:
            lo = int(rng.integers(0, 3))
            hi = lo + int(rng.integers(2, 9))
        dfa = CountedDFA(table, counted, 0, accepting, lo, hi)
        if dfa.is_empty():
            continue
        slot, horizon = CountedSlot(dfa, token_type=1), int(rng.integers(1, 5))
        periodic += dfa.period is not None and dfa.period[1] > 1
        seen, todo = {slot.initial}, [slot.initial]
        while todo:
            q = todo.pop()
            rep, shift = slot.fold(q, 0, horizon)
            merged += rep != q
            assert slot.fold(rep, shift, None) == (q, 0)
            assert _same_for(slot, q, rep, horizon, range(3)), (trial, slot._keys[q], slot._keys[rep])
            for byte in range(3):
                t = slot.trans[q][byte]
                if t >= 0 and t not in seen and slot._keys[t][1] <= (lo + 12 if hi is None else hi):
                    seen.add(t)
                    todo.append(t)
    assert merged > 100 and periodic > 10


def test_count_levels_against_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(30):
        m = int(rng.integers(2, 7))
        table = np.full((m, 256), -1, dtype=np.int32)
        table[:, :3] = rng.integers(-1, m, size=(m, 3))
        counted = rng.random((m, 256)) < 0.5
        accepting = rng.random(m) < 0.4
        lo, hi = int(rng.integers(0, 6)), int(rng.integers(6, 12))
        dfa = CountedDFA(table, counted, 0, accepting, lo, hi)
        reach = {(0, 0)}  # brute force over (state, count) pairs, counts capped past hi
        frontier = set(reach)
        for _ in range(60):
            frontier = {
                (int(table[s, b]), c + int(counted[s, b]))
                for s, c in frontier
                for b in range(3)
                if table[s, b] >= 0 and c + int(counted[s, b]) <= hi
            } - reach
            reach |= frontier
        for s, c in reach:
            expected = any(_accepts_from(table, counted, accepting, s, c, lo, hi, depth) for depth in (3 * (hi + m),))
            assert dfa.live(s, c) == expected, (trial, s, c)


def test_slot_needs_against_each_token_stepped_in_python():
    """CountedSlot.needs (walked over the token trie, a level at a time) against the definition:
    per token, the most over the bytes it reads alive of (count so far + first_level there)."""
    from sgl_runtime.constrained.counted import _or
    from sgl_runtime.constrained.grammar.token_trie import TokenTrie
    from sgl_runtime.constrained.grammar.walk import TokenTable

    rng = np.random.default_rng(1)
    tokens = sorted({bytes(rng.integers(0, 4, size=int(rng.integers(1, 7))).tolist()) for _ in range(400)})
    trie = TokenTrie(TokenTable([b""] + tokens))  # an empty token (id 0) needs nothing
    for trial in range(20):
        m = int(rng.integers(2, 7))
        trans = np.full((m, 256), -1, dtype=np.int32)
        trans[:, :4] = rng.integers(-1, m, size=(m, 4))
        dfa = CountedDFA(trans, rng.random((m, 256)) < 0.5, 0, rng.random(m) < 0.4, 0, int(rng.integers(3, 9)))
        if dfa.is_empty():
            continue
        slot = CountedSlot(dfa, 0)
        first = [_or(dfa.first_level(s, 0), 1 << 40) for s in range(m)]
        for state in range(m):
            expected = [0]
            for data in tokens:
                st, got, need = state, 0, first[state]
                for b in data:
                    if trans[st, b] < 0:
                        break
                    got += int(dfa.counted[st, b])
                    st = int(trans[st, b])
                    need = max(need, got + first[st])
                expected.append(need)
            assert slot.needs(state, trie).tolist() == expected, (trial, state)


def test_most_counts_to_accept_against_brute_force():
    """CountedDFA.most_to_accept: the longest count of a path to acceptance, None where a cycle
    can be taken on the way (checked by enumerating paths of random small automata)."""
    rng = np.random.default_rng(2)
    bounded = unbounded = 0
    for trial in range(80):
        m = int(rng.integers(2, 7))
        table = np.full((m, 256), -1, dtype=np.int32)
        table[:, :3] = rng.integers(-1, m, size=(m, 3))
        if trial % 2:  # forward edges only: a finite language
            table[:, :3] = np.where(table[:, :3] > np.arange(m)[:, None], table[:, :3], -1)
        counted = rng.random((m, 256)) < 0.5
        accepting = rng.random(m) < 0.4
        dfa = CountedDFA(table, counted, 0, accepting, 0, None)
        for state in range(m):
            most, cyclic = _most_by_paths(table, counted, accepting, state, m)
            if most is None:
                continue  # no accept reachable: never asked
            got = dfa.most_to_accept(state)
            assert got == (None if cyclic else most), (trial, state, got, most, cyclic)
            bounded += got is not None
            unbounded += got is None
    assert bounded > 40 and unbounded > 20


def _most_by_paths(table, counted, accepting, start, m):
    """(the most counted transitions of a path from start to an accept, over paths of length < 2m,
    whether some such path repeats a state): None when no accept is reachable."""
    best, cyclic = None, False
    todo = [(start, 0, (start,))]
    while todo:
        s, c, path = todo.pop()
        if accepting[s]:
            best = c if best is None else max(best, c)
            cyclic |= len(set(path)) < len(path)
        if len(path) < 2 * m:
            for b in range(3):
                t = int(table[s, b])
                if t >= 0:
                    todo.append((t, c + int(counted[s, b]), path + (t,)))
    return best, cyclic


def _accepts_from(table, counted, accepting, s, c, lo, hi, depth):
    todo, seen = [(s, c)], {(s, c)}
    while todo:
        s, c = todo.pop()
        if accepting[s] and lo <= c <= hi:
            return True
        for b in range(3):
            t = int(table[s, b])
            if t >= 0 and c + int(counted[s, b]) <= hi and (t, c + int(counted[s, b])) not in seen:
                seen.add((t, c + int(counted[s, b])))
                todo.append((t, c + int(counted[s, b])))
    return False


LONG = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 34, "maxLength": 40},
        "tag": {"type": ["string", "null"], "maxLength": 36, "pattern": "^[a-z\u00e9]*$"},
        "n": {"type": "integer"},
        "note": {"type": "string", "pattern": "^[ab\\n]{0,36}$"},
    },
    "required": ["name"],
    "additionalProperties": False,
}
MASK_TOKENS = [
    "{",
    "}",
    '"',
    '"name":"',
    '",',
    '"tag":',
    "null",
    "aaaaaaaa",
    "aaaa",
    "a",
    "\u00e9",
    "b",
    "\\n",
    '"}',
    ',"note":"',
]


def test_long_strings_become_counted_terminals_with_the_flat_automatons_masks():
    grammar = schema_to_grammar(LONG)
    assert sum(isinstance(t, CountedDFA) for t in grammar.terminals.values()) == 3
    vocab = make_vocab(MASK_TOKENS)
    counted = grammar.constraint(vocab)
    flat = DFAConstraint(ByteDFA.from_fsm(schema_to_fsm(LONG)), vocab)
    rng, compared, finished = random.Random(7), 0, 0
    for _ in range(40):
        mc, mf, text = counted.matcher(), flat.matcher(), ""
        for _ in range(40):
            bits_c, bits_f = mask_bits(mc.bitmask(), vocab.size), mask_bits(mf.bitmask(), vocab.size)
            choices = np.flatnonzero(bits_f[: len(MASK_TOKENS)]).tolist()
            if not choices:  # the text is whole, or a dead end of this vocabulary (EOS in the flat mask only)
                finished += mc.is_accepting()
                break
            assert np.array_equal(bits_c, bits_f), (text, np.flatnonzero(bits_c != bits_f))
            compared += 1
            token = rng.choice(choices)
            mc.advance(token)
            mf.advance(token)
            text += MASK_TOKENS[token]
    assert compared >= 300 and finished >= 3


def test_short_bounded_strings_are_counted_with_the_masks_of_flat_ones(monkeypatch):
    """Strings bounded past COUNTED_ABOVE (8) characters are counted terminals in the grammar form,
    so their positions share masks; along random walks through the Qwen2.5 vocabulary (tokens that
    end inside a character included) the masks equal those of the flat strings they replace."""
    from sgl_runtime.constrained.compiler import compile_constraint
    from sgl_runtime.constrained.json_schema import long_strings
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tok = load_qwen2_tokenizer()
    schema = {  # no additionalProperties: false, so the grammar form
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "code": {"type": "string", "minLength": 9, "maxLength": 12, "pattern": "^[a-z\u00e9 ]*$"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
        },
        "required": ["name", "code", "tags"],
    }
    assert sum(isinstance(t, CountedDFA) for t in schema_to_grammar(schema).terminals.values()) == 3
    counted = compile_constraint("json_schema", schema, tok)
    monkeypatch.setattr(long_strings, "COUNTED_ABOVE", 32)
    assert not any(isinstance(t, CountedDFA) for t in schema_to_grammar(schema).terminals.values())
    flat = compile_constraint("json_schema", schema, tok)
    starts = ['{"name":"', '{"name":"ab","code":"', '{"name":"","code":"abc d\u00e9fgh","tags":["']
    rng, compared = random.Random(5), 0
    for walk in range(8):
        mc, mf = counted.matcher(), flat.matcher()
        for token in tok.encode(starts[walk % 3], add_special_tokens=False):
            mc.advance(token)
            mf.advance(token)
        for _ in range(16):
            bits_c, bits_f = mask_bits(mc.bitmask(), tok.vocab_size), mask_bits(mf.bitmask(), tok.vocab_size)
            assert np.array_equal(bits_c, bits_f), (walk, np.flatnonzero(bits_c != bits_f)[:5])
            compared += 1
            choices = np.flatnonzero(bits_f[: tok.vocab_size]).tolist()
            if not choices or mf.is_accepting():
                break
            short = [c for c in choices if len(tok.decode([c])) <= 2]  # reach the bounds, not only the end
            token = rng.choice(short if short and rng.random() < 0.7 else choices)
            mc.advance(token)
            mf.advance(token)
    assert compared >= 80


def test_long_strings_in_the_grammar_form_agree_with_jsonschema():
    schema = {
        "type": "array",
        "items": {"$ref": "#/$defs/item"},
        "$defs": {
            "item": {
                "type": "object",
                "properties": {
                    "k": {"type": "string", "maxLength": 300},
                    "v": {"$ref": "#/$defs/v"},
                    "w": {"$ref": "#/$defs/w"},
                },
                "additionalProperties": False,
            },
            "v": {"type": ["string", "number"], "minLength": 50, "pattern": "x", "maximum": 3},
            "w": {"type": "string", "pattern": "^.{0,40}$", "minLength": 2},
        },
    }
    language = compile_schema(schema)
    assert any(isinstance(t, CountedDFA) for t in language.terminals.values())
    validator = jsonschema.Draft202012Validator(schema)
    rng, wrong, valid = random.Random(5), [], 0
    for _ in range(400):
        items = []
        for _ in range(rng.randrange(3)):
            item = {}
            if rng.random() < 0.7:
                item["k"] = "".join(rng.choice("ab\u00e9\n") for _ in range(rng.choice([0, 1, 299, 300, 301])))
            if rng.random() < 0.7:
                n = rng.choice([0, 49, 50, 51, 400])
                item["v"] = rng.choice(["", "x"]) + "y" * n if rng.random() < 0.8 else rng.choice([1, 3, 4, 2.5])
            if rng.random() < 0.5:
                # no line terminators: `.` and `$` differ between ECMA-262 (followed here) and Python (jsonschema)
                item["w"] = "".join(rng.choice("a \u00e9") for _ in range(rng.choice([1, 2, 39, 40, 41])))
            items.append(item)
        text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
        ok = validator.is_valid(items)
        valid += ok
        if language.accepts(text) != ok:
            wrong.append((ok, text[:80]))
    assert wrong == [] and valid >= 40


def test_unique_arrays_of_long_strings_use_counted_item_terminals():
    schema = {"type": "array", "uniqueItems": True, "items": {"type": "string", "maxLength": 40}}
    language = compile_schema(schema)
    assert sorted(language.unique.values()) == ["close", "item", "open"]
    assert any(isinstance(dfa, CountedDFA) for dfa in language.terminals.values())
    validator = jsonschema.Draft202012Validator(schema)
    words = ["a" * 39, "a" * 40, "a" * 41, "b" * 40, "\u00e9" * 40, ""]
    rng, checked = random.Random(2), 0
    for _ in range(300):
        array = [rng.choice(words) for _ in range(rng.randrange(4))]
        text = json.dumps(array, ensure_ascii=False, separators=(",", ":"))
        assert language.accepts(text) == validator.is_valid(array), text
        checked += validator.is_valid(array) and len(array) >= 2
    assert checked >= 20


def test_shared_walks_inside_long_strings_give_the_masks_of_walking_every_token(monkeypatch):
    """Two shortcuts of the mask walk inside long strings, checked against walking every Qwen2.5
    token from the exact state: one count standing for the counts no token can tell apart
    (LexerContext.fold: past minLength, and below it), near maxLength the mask of a
    count far from it less the tokens too long for what is left (LexerContext.cut), and one token
    per byte-class sequence (token_classes.py)."""
    from sgl_runtime.constrained.compiler import compile_constraint
    from sgl_runtime.constrained.grammar import lexer, token_classes, walk
    from sgl_runtime.constrained.grammar.token_classes import TokenClasses
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tok = load_qwen2_tokenizer()
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 400},
            "t": {"type": "string", "pattern": "^[a-z ]*$", "minLength": 3, "maxLength": 200},
            "u": {"type": "string", "minLength": 200},  # counts far below minLength share a mask
            "v": {"type": "string", "pattern": "^(xy)*$", "minLength": 201},  # ... by their parity here
            "w": {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}$", "maxLength": 300},  # bounded by its pattern
        },
        "required": ["s", "t", "u", "v", "w"],
        "additionalProperties": False,
    }
    value = {
        "s": 'h\u00e9llo w\\orld \n\t"q" ' * 20,
        "t": "abc def " * 24,
        "u": "lorem ipsum " * 20,
        "v": "xy" * 110,
        "w": "0123abcd-ef45",
    }
    text = json.dumps(value, ensure_ascii=False)
    ids = tok.encode(text.replace(", ", ",").replace(": ", ":"), add_special_tokens=False)

    def masks():
        constraint = compile_constraint("json_schema", schema, tok)
        matcher, out = constraint.matcher(), []
        for token in ids:
            out.append(mask_bits(matcher.bitmask()))
            matcher.advance(token)
        return out, constraint

    monkeypatch.setattr(walk, "GROUP_AFTER_RUNS", 0)  # group every context's tokens at once
    monkeypatch.setattr(token_classes, "IN_BACKGROUND", False)  # ... on this thread, used from the next walk on
    shared, constraint = masks()
    assert any(isinstance(c, TokenClasses) for c in constraint.masks._classes.values())
    assert constraint.masks._needs  # some masks near maxLength were cut from the mask far from it
    monkeypatch.setattr(walk, "MAX_GROUPED_CLASSES", 0)
    exact_fold = lexer.LexerContext.fold
    monkeypatch.setattr(
        lexer.LexerContext, "fold", lambda self, state, shift, horizon: exact_fold(self, state, shift, None)
    )
    monkeypatch.setattr(lexer.LexerContext, "cut", lambda self, state: None)
    exact, _ = masks()
    assert len(shared) == len(exact) > 60
    for i, (a, b) in enumerate(zip(shared, exact)):
        assert np.array_equal(a, b), (i, tok.decode(ids[:i]), np.flatnonzero(a != b)[:5])


def test_strings_of_a_large_pattern_keep_every_escape_in_the_grammar_form():
    eui = r"^(([0-9A-Fa-f]{2}-){7}|([0-9A-Fa-f]{2}:){7}|([0-9A-Fa-f]{2}\s){7}|([0-9A-Fa-f]{2}){7})([0-9A-Fa-f]{2})$"
    schema = {"type": "object", "properties": {"eui": {"type": "string", "pattern": eui}}}  # free-form: grammar
    language = compile_schema(schema)
    assert any(isinstance(t, CountedDFA) for t in language.terminals.values())
    validator = jsonschema.Draft202012Validator(schema)
    for sep in ["-", ":", " ", "\x0b", "\x0c", "\t", "\u00a0", "\n", "x"]:
        value = {"eui": sep.join(["0d"] * 8)}
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert language.accepts(text) == validator.is_valid(value), repr(sep)
    assert language.accepts('{"eui":"0d\\u000b0d\\u000b0d\\u000b0d\\u000b0d\\u000b0d\\u000b0d\\u000b0d"}')


def test_closed_schemas_keep_one_automaton_unless_a_string_is_longer_than_256():
    def closed(n):
        return {
            "type": "object",
            "properties": {"s": {"type": "string", "maxLength": n}},
            "additionalProperties": False,
        }

    assert not hasattr(compile_schema(closed(100)), "terminals")  # one automaton: device-side masks
    grammar = compile_schema(closed(1000))
    assert any(isinstance(t, CountedDFA) for t in grammar.terminals.values())
    assert grammar.accepts('{"s":"' + "x" * 1000 + '"}') and not grammar.accepts('{"s":"' + "x" * 1001 + '"}')


def test_long_strings_under_pattern_properties_stay_counted():
    """An object whose long strings sit under `patternProperties` (AWS Cognito `Links`, values up to
    1,024 characters of a Unicode class) takes the grammar form's rules, its strings one counted
    token each, not one flat automaton per position (which took minutes to build)."""
    links = {
        "type": "object",
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 2,
        "patternProperties": {"^cognito:(en|fr)$": {"type": "string", "minLength": 1, "maxLength": 1024}},
    }
    schema = {"type": "object", "properties": {"Links": links, "Id": {"type": "string"}}, "required": ["Links"]}
    language = compile_schema(schema)
    assert any(isinstance(dfa, CountedDFA) for dfa in language.terminals.values())
    validator = jsonschema.Draft202012Validator(schema)
    for instance in (
        {"Links": {"cognito:en": "a" * 1024}},
        {"Links": {"cognito:en": "a" * 1025}},
        {"Links": {"cognito:en": "x", "cognito:fr": "y"}},
        {"Links": {"cognito:de": "x"}},
        {"Links": {}},
        {"Links": {"cognito:fr": "é\n"}, "Id": "i"},
    ):
        text = json.dumps(instance, ensure_ascii=False, separators=(",", ":"))
        assert language.accepts(text) == validator.is_valid(instance), text
