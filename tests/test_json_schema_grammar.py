"""The grammar form of JSON Schema (structure as rules, leaves as flat automata): exact against
jsonschema at any depth (free-form values, recursive $ref), the same masks as the flat automaton
where both are exact (tiny vocabulary), the dispatch between the two forms, and its options."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from tiny_vocab import JSON_TOKENS, make_vocab, mask_bits

from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.compiler import compile_constraint
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.grammar.compiler import GrammarConstraint
from sgl_runtime.constrained.json_schema.compiler import schema_to_fsm
from sgl_runtime.constrained.json_schema.grammar_form import SchemaGrammar
from sgl_runtime.constrained.json_schema.language import compile_schema, schema_to_grammar
from sgl_runtime.constrained.json_schema.serialize import compact_json

KEYS = ["a", "b", "id", "meta", "k", "v", "x-1", "zz", "value", "children", ""]
SCALARS = [0, 1, -2, 2.5, "s", "", "ab", "a\nb", True, False, None]


def random_value(rng: random.Random, depth: int):
    """A random JSON value whose containers nest exactly `depth` deep (0: a scalar)."""
    if depth == 0:
        return rng.choice(SCALARS)
    n = rng.randrange(1, 4)
    deep = rng.randrange(n)
    if rng.random() < 0.5:
        return [random_value(rng, depth - 1 if i == deep else rng.randrange(depth)) for i in range(n)]
    keys = rng.sample(KEYS, n)
    return {k: random_value(rng, depth - 1 if i == deep else rng.randrange(depth)) for i, k in enumerate(keys)}


def nesting(value) -> int:
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


def check_against_jsonschema(schema, instances, min_deep_valid: int = 1) -> None:
    language = compile_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    wrong, deep_valid = [], 0
    for instance in instances:
        text = compact_json(instance, schema)
        valid = validator.is_valid(instance)
        if language.accepts(text) != valid:
            wrong.append((valid, text))
        deep_valid += valid and nesting(instance) >= 6
    assert wrong == [], wrong[:5]
    assert deep_valid >= min_deep_valid


FREE_FORM_SCHEMAS = [
    {},
    {"type": "object"},
    {"type": "array"},
    {"type": "object", "properties": {"id": {"type": "integer"}, "meta": {}}, "required": ["id"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
    {"type": "array", "items": {"type": "object", "properties": {"v": {"type": "array"}}}},
    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": {"type": "array"}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2, "maxProperties": 3},
    {"prefixItems": [{"type": "integer"}, {}], "items": {"type": "object"}, "minItems": 1, "maxItems": 4},
    {"type": ["object", "string"], "propertyNames": {"maxLength": 2}},
    {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "object", "propertyNames": {"pattern": "^[a-k]*$"}}]},
    {"oneOf": [{"type": "integer"}, {"type": "array", "minItems": 2}]},
    {"type": "object", "dependentRequired": {"a": ["b"]}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/free"}}, "$defs": {"free": True}},
]


@pytest.mark.parametrize("index", range(len(FREE_FORM_SCHEMAS)))
def test_deep_free_form_values_match_jsonschema(index):
    schema = FREE_FORM_SCHEMAS[index]
    rng = random.Random(index)
    instances = [random_value(rng, rng.randrange(8)) for _ in range(150)]
    instances += [{"id": 1, "meta": random_value(rng, 7)}, [random_value(rng, 7)], [1, random_value(rng, 6)]]
    instances += [{"a": random_value(rng, 6), "b": 1}, {"x-1": 1, "zz": [random_value(rng, 6)]}]
    instances += [{"a": 1, "v": [{"v": [random_value(rng, 6)]}]}, [{"v": [[[[[[1]]]]]]}]]
    assert isinstance(compile_schema(schema), SchemaGrammar)
    check_against_jsonschema(schema, instances, min_deep_valid=1 if index not in (10, 11) else 0)


TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
LINKED = {
    "$defs": {
        "list": {
            "anyOf": [
                {"type": "null"},
                {
                    "type": "object",
                    "properties": {"head": {"type": "string", "maxLength": 3}, "tail": {"$ref": "#/$defs/list"}},
                    "required": ["head", "tail"],
                    "additionalProperties": False,
                },
            ]
        }
    },
    "$ref": "#/$defs/list",
}
JSON_VALUE = {
    "$defs": {
        "j": {
            "anyOf": [
                {"type": ["string", "integer", "boolean"]},
                {"type": "array", "items": {"$ref": "#/$defs/j"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/j"}},
            ]
        }
    },
    "$ref": "#/$defs/j",
}


def random_tree(rng: random.Random, depth: int, broken: bool = False):
    node: dict = {"value": rng.randrange(-5, 5)}
    if depth:
        node["children"] = [random_tree(rng, max(depth - 1 - rng.randrange(2) * i, 0), broken) for i in range(2)]
    if broken and rng.random() < 0.2:
        rng.choice([lambda: node.pop("value"), lambda: node.update(value="1"), lambda: node.update(extra=1)])()
    return node


def random_list(rng: random.Random, length: int, broken: bool = False):
    out = None
    for _ in range(length):
        head = "x" * rng.randrange(5 if broken else 4)
        out = {"head": head, "tail": out}
    return out


def test_recursive_refs_match_jsonschema():
    rng = random.Random(7)
    trees = [random_tree(rng, d, broken=b) for d in range(9) for b in (False, True) for _ in range(3)]
    check_against_jsonschema(TREE, trees, min_deep_valid=3)
    lists = [random_list(rng, n, broken=b) for n in range(12) for b in (False, True)] + [{"head": "a"}, 1]
    check_against_jsonschema(LINKED, lists, min_deep_valid=2)
    values = [random_value(rng, rng.randrange(9)) for _ in range(200)]
    check_against_jsonschema(JSON_VALUE, values, min_deep_valid=3)  # null and floats are invalid here


def test_dispatch_flat_when_exact_grammar_when_free_form_or_recursive():
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    assert not isinstance(compile_schema(closed), SchemaGrammar)
    assert isinstance(compile_schema(TREE), SchemaGrammar)
    assert isinstance(compile_schema({"type": "object"}), SchemaGrammar)
    bounded = compile_schema({"type": "object"}, max_nesting_depth=2)  # an explicit bound: the flat automaton
    assert not isinstance(bounded, SchemaGrammar) and not bounded.accepts('{"a":[[[1]]]}')
    vocab = make_vocab(JSON_TOKENS)
    assert isinstance(compile_constraint("json_schema", closed, _Tok(vocab)), DFAConstraint)
    assert isinstance(compile_constraint("json_schema", TREE, _Tok(vocab)), GrammarConstraint)


def test_too_large_for_one_automaton_becomes_rules():
    # 6 optional bounded strings per object, 3 levels: the flat product is past a tiny budget
    leaf = {"type": "string", "maxLength": 40, "pattern": "^[a-z]*$"}
    level = {"type": "object", "properties": {f"p{i}": leaf for i in range(6)}, "additionalProperties": False}
    schema = {**level, "properties": {**level["properties"], "child": {**level, "properties": {"x": level}}}}
    with pytest.raises(ConstraintError, match="too complex"):
        compile_schema(schema, max_work_states=1_000, max_nesting_depth=3)
    language = compile_schema(schema, max_work_states=1_000)
    assert isinstance(language, SchemaGrammar) and len(language.terminals) > 10  # rules, with strings as leaves
    assert language.accepts('{"p0":"ab","child":{"x":{"p5":"z"}}}')
    assert not language.accepts('{"p0":"aB"}') and not language.accepts('{"child":{"x":{"y":1}}}')


def test_options_in_the_grammar_form():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "free": {}}, "required": ["n"]}
    value = {"n": 1, "free": {"a": [{"b": [[{"c": None}]]}]}, "extra": [1, 2]}
    pretty = schema_to_grammar(schema, indent=2)
    assert pretty.accepts(json.dumps(value, indent=2)) and not pretty.accepts(json.dumps(value))
    spaced = schema_to_grammar(schema, whitespace=4)
    assert spaced.accepts(json.dumps(value)) and spaced.accepts(compact_json(value, schema))
    assert not spaced.accepts('{"n": 1,     "x": 1}')  # at most 4 blanks on each side
    assert schema_to_grammar(schema, integral_floats=True).accepts('{"n":1.0}')
    assert not schema_to_grammar(schema).accepts('{"n":1.0}')
    any_order = schema_to_grammar({**schema, "properties": {"a": {}, "b": {}}}, key_order="any")
    assert any_order.accepts('{"b":1,"a":[[[[[[{}]]]]]],"n":2}') and not any_order.accepts('{"b":1,"b":2,"n":1}')
    unique = {"type": "array", "items": {}, "uniqueItems": True}
    free = compile_schema(unique)  # free-form items compared as values
    assert free.accepts('[[[[[[[1]]]]]],[1],{"a":1,"b":2}]') and not free.accepts('[{"a":1,"b":2},{"b":2,"a":1}]')
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compile_schema(unique, whitespace=4)
    assert schema_to_grammar(unique, lenient=True, whitespace=4).accepts("[[[[[[[1]]]]]], [1], [1]]")


def test_refusals_name_the_keyword_and_fall_back_to_the_bounded_automaton():
    two_objects = {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]},
        ]
    }
    with pytest.raises(
        ConstraintError, match="oneOf .value tests.: the grammar form cannot tell the alternatives apart"
    ):
        schema_to_grammar(two_objects)
    contains = {"type": "array", "contains": {"type": "integer"}}
    with pytest.raises(ConstraintError, match="contains"):
        schema_to_grammar(contains)
    flat = compile_schema(contains)  # the documented depth-bounded automaton
    assert not isinstance(flat, SchemaGrammar) and flat.accepts("[{},1]") and not flat.accepts('["a"]')
    assert not flat.accepts("[[[[[[1]]]]],1]")  # its depth bound


PRESENCE_SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    {
        "properties": {"a": {}, "b": {}},
        "anyOf": [{"required": ["a"]}, {"required": ["x"]}],
        "not": {"required": ["c", "d"]},
    },
    {"type": "object", "properties": {"a": {}}, "if": {"required": ["a"]}, "then": {"required": ["q"]}},
    {
        "type": "object",
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        "additionalProperties": {"type": "integer"},
    },
    {
        "type": "object",
        "properties": {"a": {}},
        "dependentSchemas": {"a": {"required": ["z"]}},
        "allOf": [{"$ref": "#/$defs/r"}],
        "$defs": {"r": {"required": ["b"]}},
    },
    {  # a $ref beside properties resolves against the schema's own $id
        "$id": "https://example.com/root",
        "type": "object",
        "properties": {"a": {}},
        "anyOf": [{"$ref": "#/$defs/r"}, {"required": ["q"]}],
        "$defs": {"r": {"required": ["b"]}},
    },
]


@pytest.mark.parametrize("index", range(len(PRESENCE_SCHEMAS)))
def test_conditions_on_present_keys_beside_properties(index):
    """anyOf/oneOf/not/if/dependentSchemas that only ask which keys an object has are checked where it
    closes: every object of up to 4 keys from 7, in every order, against jsonschema."""
    from itertools import permutations

    schema = PRESENCE_SCHEMAS[index]
    language = schema_to_grammar(schema)
    validator = jsonschema.Draft202012Validator(schema)
    wrong, valid = [], 0
    for n in range(5):
        for keys in permutations(["a", "b", "c", "d", "q", "x", "z"], n):
            instance = {k: [{"deep": [[[[1]]]]}] if k == "c" else 1 for k in keys}
            expected = validator.is_valid(instance)
            valid += expected
            if language.accepts(compact_json(instance, schema)) != expected:
                wrong.append(compact_json(instance, schema))
    assert wrong == [] and valid > 0


class _Tok:
    """A stand-in tokenizer: Vocabulary.from_tokenizer accepts a Vocabulary's owner."""

    def __init__(self, vocab) -> None:
        self.vocab = vocab


@pytest.fixture(autouse=True)
def _tiny_tokenizers(monkeypatch):
    from sgl_runtime.constrained import compiler

    real = compiler.Vocabulary.from_tokenizer

    def from_tokenizer(tokenizer, *args, **kwargs):
        return tokenizer.vocab if isinstance(tokenizer, _Tok) else real(tokenizer, *args, **kwargs)

    monkeypatch.setattr(compiler.Vocabulary, "from_tokenizer", staticmethod(from_tokenizer))


MASK_TOKENS = JSON_TOKENS + ['"b"', "b", '"id":', "[[", "]]", "null", '"x', "{}", "[]", ",{", '"":', "i", "d"]


def _depth(text: str) -> int:
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            in_string, escaped = (in_string, False) if escaped else (c != '"', c == "\\")
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
    return depth


def _walk_masks(a, b, vocab, rng, steps: int, max_depth: int) -> int:
    """Random walk comparing two constraints' masks; the number of steps compared."""
    ma, mb, text, compared = a.matcher(), b.matcher(), "", 0
    for _ in range(steps):
        bits_a, bits_b = mask_bits(ma.bitmask(), vocab.size), mask_bits(mb.bitmask(), vocab.size)
        if not bits_b[: len(MASK_TOKENS)].any():
            break  # a dead end of this vocabulary: the flat matcher lets EOS out of it, the grammar does not
        assert np.array_equal(bits_a, bits_b), (text, np.flatnonzero(bits_a != bits_b))
        compared += 1
        choices = [t for t in np.flatnonzero(bits_a[: len(MASK_TOKENS)]).tolist()]
        choices = [t for t in choices if _depth(text + MASK_TOKENS[t]) <= max_depth]
        if not choices:
            break
        token = rng.choice(choices)
        ma.advance(token)
        mb.advance(token)
        text += MASK_TOKENS[token]
    return compared


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", 1]}}, "required": ["a"]},
        {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "boolean"}}}, "maxItems": 3},
        {"type": "object", "additionalProperties": {"type": "array", "items": {"type": ["integer", "null"]}}},
        {},
    ],
)
def test_token_masks_equal_the_flat_automaton_within_its_depth(schema):
    vocab = make_vocab(MASK_TOKENS)
    grammar = schema_to_grammar(schema).constraint(vocab)
    flat = DFAConstraint(ByteDFA.from_fsm(schema_to_fsm(schema, max_nesting_depth=6)), vocab)
    rng = random.Random(json.dumps(schema))
    compared = sum(_walk_masks(grammar, flat, vocab, rng, 40, max_depth=3) for _ in range(12))
    assert compared >= 60


def test_closed_schema_masks_equal_in_both_forms():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, "b": {"type": "string"}},
        "required": ["b"],
        "additionalProperties": False,
    }
    vocab = make_vocab(MASK_TOKENS)
    grammar = schema_to_grammar(schema).constraint(vocab)  # the grammar form, forced: its leaves are flat
    flat = compile_constraint("json_schema", schema, _Tok(vocab))
    assert isinstance(flat, DFAConstraint)
    rng = random.Random(3)
    assert sum(_walk_masks(grammar, flat, vocab, rng, 30, max_depth=9) for _ in range(10)) >= 60


def test_compile_worker_returns_the_grammar_form():
    from sgl_runtime.constrained.cache import ConstraintCache

    vocab = make_vocab(MASK_TOKENS)
    cache = ConstraintCache(_Tok(vocab), compile_workers=1, compile_timeout=60)
    try:
        constraint = cache.get("json_schema", TREE)
        assert isinstance(constraint, GrammarConstraint)
        assert constraint.accepts('{"value":1,"children":[{"value":2,"children":[{"value":3}]}]}')
        assert not constraint.accepts('{"value":1,"children":[{"value":2,"children":[{"value":"3"}]}]}')
    finally:
        cache.shutdown()


def test_qwen_tokens_walk_deep_values_and_recursion():
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tokenizer = load_qwen2_tokenizer()
    schema = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"}, "meta": {}},
        "required": ["tree"],
        "$defs": TREE["$defs"],
    }
    constraint = compile_constraint("json_schema", schema, tokenizer)
    assert isinstance(constraint, GrammarConstraint)
    eos = tokenizer.eos_token_id
    rng = random.Random(11)
    valid = {"tree": random_tree(rng, 7), "meta": {"a": [[[[[[{"b": "c\u00e9"}]]]]]], "n": -1.5}}
    invalid = {"tree": {"value": 1, "children": [{"value": 2, "children": [{"value": "3"}]}]}, "meta": 1}
    for instance, ok in ((valid, True), (invalid, False)):
        ids = tokenizer.encode(compact_json(instance, schema), add_special_tokens=False)
        matcher, walked = constraint.matcher(), 0
        for token in ids:
            if not mask_bits(matcher.bitmask())[token]:
                break
            matcher.advance(token)
            walked += 1
        if ok:
            assert walked == len(ids) and matcher.is_accepting() and mask_bits(matcher.bitmask())[eos]
        else:
            assert walked < len(ids)


def test_the_compile_thread_part_of_the_grammar_form_is_timed(monkeypatch):
    """The worker returns the grammar text; the lark tables are built in the cache's thread, which the
    compile timeout still bounds."""
    import time

    from sgl_runtime.constrained.cache import ConstraintCache
    from sgl_runtime.constrained.errors import ConstraintTimeout

    original = SchemaGrammar.constraint

    def slow_constraint(self, vocabulary, **options):
        time.sleep(4)
        return original(self, vocabulary, **options)

    vocab = make_vocab(MASK_TOKENS)
    cache = ConstraintCache(_Tok(vocab), compile_workers=1, compile_timeout=1.5)
    try:
        cache.start_workers(wait=True)
        monkeypatch.setattr(SchemaGrammar, "constraint", slow_constraint)
        with pytest.raises(ConstraintTimeout):
            cache.get("json_schema", TREE)
    finally:
        cache.shutdown()


def test_key_tokens_are_built_once_per_key_language(monkeypatch):
    """An object's member rules ask for the `, key :` token of its undeclared keys from every state
    (2^k of them for k optional keys); the concatenation behind it is built once per language and
    position, not once per state (built per state, a CloudFormation schema took 111 s instead of 15)."""
    from sgl_runtime.constrained.json_schema import grammar_form

    asked, built = [], []
    real_key, real_concat = grammar_form.GrammarBuilder.key, grammar_form.concat

    def key(self, keys, first, ident):
        asked.append((ident, first))
        return real_key(self, keys, first, ident)

    def concat(*parts):
        built.append(len(parts))
        return real_concat(*parts)

    monkeypatch.setattr(grammar_form.GrammarBuilder, "key", key)
    monkeypatch.setattr(grammar_form, "concat", concat)
    optional = {f"k{i}": {"type": "integer"} for i in range(6)}
    schema = {
        "type": "object",
        "properties": {**optional, "free": {}},
        "additionalProperties": {"type": "string"},
        "maxProperties": 9,  # member states count keys
        "dependentRequired": {"k0": ["k5"], "k1": ["k5"]},  # and track k0, k1, k5 in any order
    }
    grammar = schema_to_grammar(schema)
    assert len(asked) > 4 * len(set(asked)) and len(built) == len(set(asked))
    constraint = grammar.constraint(make_vocab(MASK_TOKENS))
    good = '{"k4":2,"free":[{"a":null}],"k5":3,"k1":1,"zz":"x","yy":"y"}'  # fixed keys, tracked ones, others
    for text, valid in [
        (good, True),
        (good.replace('"x"', "1"), False),
        (good.replace('"k5":3,', ""), False),
        (good[:-1] + ',"a":"1","b":"2","c":"3"}', True),
        (good[:-1] + ',"a":"1","b":"2","c":"3","d":"4"}', False),  # maxProperties
    ]:
        assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)) == valid
        assert constraint.accepts(text) == valid, text


@pytest.mark.parametrize(
    "schema",
    [
        TREE,
        {"type": "object", "properties": {"a": {}, "b": {"enum": [1, "x"]}}},
        {
            "type": "array",
            "items": {"anyOf": [{"type": "object", "properties": {"x": {"$ref": "#"}}}, {"type": "integer"}]},
        },
    ],
)
def test_placeholder_grammars_skip_larks_grammar_parser_with_the_same_tables(schema):
    """build_lark reads the grammar form's plain BNF itself (lark's grammar parser is the slow part of
    building a large schema's parser); the LALR tables must be those lark builds from the text."""
    import lark

    from sgl_runtime.constrained.grammar.source import build_lark, placeholder_grammar

    text = schema_to_grammar(schema).text
    assert placeholder_grammar(text) is not None
    direct = build_lark(text, placeholders=True)
    via_text = lark.Lark(text, parser="lalr", lexer="contextual")
    assert [(str(r), r.order) for r in direct.rules] == [(str(r), r.order) for r in via_text.rules]
    assert [(t.name, t.pattern) for t in direct.terminals] == [(t.name, t.pattern) for t in via_text.terminals]
    assert _canonical_table(direct) == _canonical_table(via_text)
    assert placeholder_grammar('start: "x"\n') is None and placeholder_grammar("start: a+\n") is None


def test_placeholder_grammars_compile_like_lark_on_repeats_and_unused_rules():
    """A rule's repeated alternatives are kept once (numbered after), unused rules and terminals
    go: as lark's own Grammar.compile does with the same text."""
    import lark

    from sgl_runtime.constrained.grammar.source import build_lark

    text = 'start: a B\na: B | | C | B | \nunused: B D\nB: "<B>"\nC: "<C>"\nD: "<D>"\n'
    direct, via_text = build_lark(text, placeholders=True), lark.Lark(text, parser="lalr", lexer="contextual")
    assert [(str(r), r.order) for r in direct.rules] == [(str(r), r.order) for r in via_text.rules]
    assert len(direct.rules) == 4
    assert [t.name for t in direct.terminals] == [t.name for t in via_text.terminals] == ["B", "C"]
    assert _canonical_table(direct) == _canonical_table(via_text)


def _canonical_table(parser) -> list:
    """The LALR table with states numbered in breadth-first order from the start state."""
    table = parser.parser.parser.parser.parse_table
    order, queue, out = {table.start_states["start"]: 0}, [table.start_states["start"]], []
    while queue:
        row, actions = table.states[queue.pop(0)], []
        for symbol in sorted(row):
            action, arg = row[symbol]
            if action.name == "Shift":
                if arg not in order:
                    order[arg] = len(order)
                    queue.append(arg)
                actions.append((symbol, order[arg]))
            else:
                actions.append((symbol, str(arg)))
        out.append(actions)
    return out
