"""schema_to_fsm / schema_to_dfa: per-keyword accept/reject examples cross-checked with jsonschema,
random strings sampled from each automaton validated with jsonschema, and the error paths."""

import datetime
import ipaddress
import json
import random
import re
import urllib.parse
import uuid

import pytest
from json_oracle import DuplicateKey, is_valid, load_exact

from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema.compiler import schema_to_dfa, schema_to_fsm
from sgl_runtime.constrained.json_schema.sampling import sample
from sgl_runtime.constrained.json_schema.serialize import compact_json

# (schema, instances): every instance is checked against jsonschema's verdict.
CASES = [
    ({"type": "null"}, [None, 0, "null", False]),
    ({"type": "boolean"}, [True, False, 0, None]),
    ({"type": "integer"}, [0, -7, 12345678901234567890, 1.0, 1.5, "1", True]),
    ({"type": "number"}, [0, -0.5, 3.25, 10, "3", None]),
    ({"type": ["string", "null"]}, ["a", None, 1, []]),
    ({"type": "string"}, ["", "hé", 'a"b\\c', "line\nbreak\ttab\x01", "😀", 5]),
    ({"minLength": 2, "maxLength": 3}, ["a", "ab", "abc", "abcd", "😀😀", 7]),
    ({"pattern": "^[a-z]+[0-9]?$"}, ["abc", "abc1", "abc12", "1abc", "", 3]),
    ({"pattern": "b.d"}, ["abcde", "bxd", "bd", "b\nd", "xx"]),
    ({"enum": ["red", 1, None, [1, 2], {"a": 1}]}, ["red", 1, 1.0, None, [1, 2], [2, 1], {"a": 1}, "blue"]),
    ({"const": {"x": [1, {"y": False}]}}, [{"x": [1, {"y": False}]}, {"x": [1, {"y": 0}]}, {"x": [1]}]),
    ({"minimum": -2, "maximum": 7.5}, [-2, -2.5, 0, 7.5, 7.51, 8, "s"]),
    ({"exclusiveMinimum": 0, "exclusiveMaximum": 1}, [0, 0.5, 1, -0.1, 0.999]),
    ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 700, 8, 7.0, 7.5]),
    ({"multipleOf": 0.25}, [0.5, 0.75, 1, 0.3, -2.25]),
    # decimal multiples that float division misjudges (9.02 / 0.01 == 901.99...)
    ({"type": "number", "minimum": 0, "multipleOf": 0.01}, [9.02, 0.07, 34.99, 9.025, -0.01]),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        [{"a": 1}, {"a": 1, "b": "x"}, {"b": "x"}, {"a": 1, "c": 2}, {"a": "1"}, {}],
    ),
    (
        {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
        [{"a": 1, "z": "q"}, {"z": 1}, {"a": 1}, {}, 5],
    ),
    (
        {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
        [{"x-a": 1}, {"x-a": "s"}, {"y": 1}, {}],
    ),
    ({"propertyNames": {"maxLength": 2}}, [{"ab": 1}, {"abc": 1}, {}]),
    ({"minProperties": 1, "maxProperties": 2}, [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}]),
    ({"required": ["x", "y"]}, [{"x": 1, "y": 2}, {"y": 2, "x": 1}, {"x": 1}]),
    ({"dependentRequired": {"a": ["b"]}}, [{"a": 1, "b": 2}, {"a": 1}, {"b": 1}, {}]),
    ({"dependentSchemas": {"a": {"required": ["c"]}}}, [{"a": 1, "c": 2}, {"a": 1}, {"b": 1}]),
    (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        [[], [1], [1, 2, 3], [1, 2, 3, 4], ["a"]],
    ),
    (
        {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [["a", 1], ["a"], [], ["a", 1, 2], [1, "a"]],
    ),
    (
        {"contains": {"type": "string"}, "minContains": 2, "maxContains": 3},
        [["a", "b"], ["a", 1], ["a", "b", "c", "d"], [1, "a", "b"]],
    ),
    ({"anyOf": [{"type": "string"}, {"minimum": 10}]}, ["s", 11, 5]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2.5, 3, 1.5]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]}, [{"a": 1}, {"a": "x"}, {}]),
    ({"not": {"type": ["string", "object"]}}, [1, "s", {}, [], None]),
    ({"not": {"enum": [1, "a"]}}, [1, 1.0, "a", 2, "b"]),
    (
        {
            "if": {"properties": {"k": {"const": "n"}}, "required": ["k"]},
            "then": {"required": ["n"]},
            "else": {"required": ["s"]},
        },
        [{"k": "n", "n": 1}, {"k": "n"}, {"k": "x", "s": 1}, {"k": "x"}],
    ),
    (
        {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "properties": {"p": {"$ref": "#/$defs/pos"}}},
        [{"p": 1}, {"p": 0}, {}],
    ),
    (
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/node"}},
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        [{}, {"next": {}}, {"next": {"next": {}}}, {"next": 1}],
    ),
    (
        {
            "properties": {"a": {}},
            "anyOf": [{"properties": {"b": {}}}, {"properties": {"c": {"type": "integer"}}}],
            "unevaluatedProperties": False,
        },
        [{"a": 1}, {"a": 1, "b": 2}, {"c": 1}, {"c": "x"}, {"d": 1}, {"b": 1, "c": 2}, "s"],
    ),
    (
        {
            "prefixItems": [{"type": "integer"}],
            "if": {"prefixItems": [True, {"const": "x"}]},
            "then": {"prefixItems": [True, True, {"type": "string"}]},
            "unevaluatedItems": False,
        },
        [[1], [1, "x"], [1, "x", "y"], [1, "x", 2], [1, "z"], [1, "x", "y", "w"]],
    ),
    (
        {
            "$id": "https://example.com/root",
            "$ref": "list",
            "$defs": {
                "foo": {"$dynamicAnchor": "items", "type": "string"},
                "list": {
                    "$id": "list",
                    "type": "array",
                    "items": {"$dynamicRef": "#items"},
                    "$defs": {"items": {"$comment": "default", "$dynamicAnchor": "items"}},
                },
            },
        },
        [["a", "b"], [1], [], ["a", None]],
    ),
    (True, [1, "x", {"a": [None]}]),
    (False, [1, "x", None]),
    ({"title": "t", "description": "d", "examples": [1], "default": 2, "$comment": "c", "type": "integer"}, [1, "1"]),
]


def _expected(schema, instance) -> bool:
    return is_valid(schema, instance)


@pytest.mark.parametrize("schema,instances", CASES, ids=[json.dumps(c[0])[:40] for c in CASES])
def test_keyword_examples_agree_with_jsonschema(schema, instances):
    dfa = schema_to_dfa(schema, integral_floats=True)
    for instance in instances:
        text = compact_json(instance, schema)
        assert dfa.accepts(text) == _expected(schema, instance), (schema, text)


@pytest.mark.parametrize("schema,instances", CASES, ids=[json.dumps(c[0])[:40] for c in CASES])
def test_sampled_strings_are_valid(schema, instances):
    dfa = schema_to_dfa(schema)
    rng = random.Random(1234)
    checked = 0
    for _ in range(40):
        text = sample(dfa, rng)
        if text is None:
            assert schema is False or not any(_expected(schema, i) for i in instances)
            return
        try:
            instance = load_exact(text)
        except DuplicateKey:
            continue  # only free-form keys can repeat; see json_schema.py's docstring
        assert _expected(schema, instance), (schema, text)
        checked += 1
    assert checked >= 20


FORMAT_CASES = [
    ("date", ["2024-02-29", "2023-02-29", "2024-13-01", "24-01-01"]),
    ("time", ["12:30:00Z", "23:59:59.5+02:00", "25:00:00Z", "12:30"]),
    ("date-time", ["2024-01-31T08:00:00Z", "2024-01-32T08:00:00Z", "2024-01-31 08:00:00Z"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000"]),
    ("email", ["a.b@example.com", "not-an-email", "@x.com"]),
    ("ipv4", ["192.168.0.1", "256.1.1.1", "01.2.3.4"]),
    ("ipv6", ["::1", "2001:db8::8a2e:370:7334", "12345::", "1:2:3"]),
    ("hostname", ["example.com", "-bad.com", "a" * 64]),
    ("uri", ["https://example.com/a/b?x=1#f", "example.com", "http://"]),
]


def _valid_hostname(s: str) -> bool:
    labels = s.split(".")
    return len(s) <= 253 and all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", x) for x in labels)


def _valid_uri(s: str) -> bool:
    parts = urllib.parse.urlsplit(s)
    return (
        bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme))
        and " " not in s
        and (not parts.netloc or _valid_hostname(parts.hostname or "") or _valid_ip(parts.hostname or ""))
    )


def _valid_ip(s: str, version=None) -> bool:
    try:
        return ipaddress.ip_address(s).version == version if version else bool(ipaddress.ip_address(s))
    except ValueError:
        return False


def _succeeds(fn) -> bool:
    try:
        fn()
        return True
    except ValueError:
        return False


# Reference validators (stdlib; jsonschema's own format checkers need optional packages).
FORMAT_REFERENCE = {
    "date": lambda s: _succeeds(lambda: datetime.date.fromisoformat(s)),
    "time": lambda s: (
        s[-1] == "Z" or s[-6] in "+-" and _succeeds(lambda: datetime.datetime.fromisoformat("1970-01-01T" + s))
    ),
    "date-time": lambda s: "T" in s and _succeeds(lambda: datetime.datetime.fromisoformat(s)),
    "uuid": lambda s: len(s) == 36 and _succeeds(lambda: uuid.UUID(s)),
    "email": lambda s: s.count("@") == 1 and _valid_hostname(s.split("@")[1]) and s.split("@")[0] != "",
    "ipv4": lambda s: _valid_ip(s, 4),
    "ipv6": lambda s: _valid_ip(s, 6),
    "hostname": _valid_hostname,
    "uri": _valid_uri,
}


@pytest.mark.parametrize("fmt,strings", FORMAT_CASES)
def test_formats_accept_only_valid_strings(fmt, strings):
    dfa = schema_to_dfa({"type": "string", "format": fmt})
    valid = FORMAT_REFERENCE[fmt]
    assert dfa.accepts(json.dumps(strings[0])), strings[0]
    for s in strings:
        if dfa.accepts(json.dumps(s)):
            assert valid(s), (fmt, s)
    rng = random.Random(7)
    for _ in range(40):
        text = sample(dfa, rng)
        assert valid(json.loads(text)), (fmt, text)


def test_fsm_matches_dfa_and_is_interegular():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "s": {"enum": ["a", "b"]}},
        "required": ["n"],
    }
    fsm, dfa = schema_to_fsm(schema), schema_to_dfa(schema)
    for text in ['{"n":3}', '{"n":3,"s":"a"}', '{"n":-1}', '{"s":"a"}', '{"n":3,"s":"c"}', '{"n":3,"x":[1]}']:
        assert fsm.accepts(text) == dfa.accepts(text), text


def test_property_order_is_schema_order_then_extras():
    schema = {"properties": {"b": {}, "a": {}}}
    dfa = schema_to_dfa(schema)
    assert dfa.accepts('{"b":1,"a":2,"z":3}')
    assert not dfa.accepts('{"a":2,"b":1}')


def test_whitespace_option_is_bounded():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    assert not schema_to_dfa(schema).accepts('{"a": [1, 2]}')
    spaced = schema_to_dfa(schema, whitespace=r"[ ]?")
    assert spaced.accepts('{"a": [1, 2]}') and spaced.accepts('{ "a" : [ 1 , 2 ] }')
    assert not spaced.accepts('{"a":  [1]}')
    assert schema_to_dfa(schema, whitespace=2).accepts('{\n "a":[1]}')
    with pytest.raises(ConstraintError, match="bounded"):
        schema_to_dfa(schema, whitespace=r"[ ]*")
    with pytest.raises(ConstraintError, match="whitespace"):
        schema_to_dfa(schema, whitespace=r"x?")


@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"$recursiveRef": "#"}, "$recursiveRef"),
        ({"anyOf": [{"required": [k]} for k in "abcde"], "unevaluatedProperties": False}, "unevaluatedProperties"),
        ({"$ref": "https://example.com/schema"}, "$ref"),
        ({"pattern": "\\p{Script=Greek}"}, "Script=Greek"),
        ({"type": "strng"}, "type"),
        ({"multipleOf": 0.123456789}, "multipleOf"),
    ],
)
def test_unsupported_or_invalid_raise_constraint_error(schema, keyword):
    with pytest.raises(ConstraintError, match=keyword.replace("$", r"\$")):
        schema_to_dfa(schema)


def test_lenient_ignores_unsupported_keywords():
    dfa = schema_to_dfa({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, lenient=True)
    assert dfa.accepts("[1,2]") and not dfa.accepts('["a"]')


def test_recursion_is_unrolled_to_the_bound():
    schema = {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"}
    dfa = schema_to_dfa(schema, max_recursion_depth=3)
    assert dfa.accepts("[[[]]]") and not dfa.accepts("[[[[]]]]")
    with pytest.raises(ConstraintError, match="recursion"):
        schema_to_dfa({"$defs": schema["$defs"], "not": {"$ref": "#/$defs/t"}})


def test_uniqueitems_trivial_case_and_strings_json_escaping():
    assert schema_to_dfa({"type": "array", "uniqueItems": True, "maxItems": 1}).accepts("[1]")
    dfa = schema_to_dfa({"type": "string"})
    assert dfa.accepts('"a\\nb"') and not dfa.accepts('"a\nb"') and not dfa.accepts('"a\\qb"')


def test_numbers_follow_json_grammar():
    dfa = schema_to_dfa({"type": "number"})
    for good in ["0", "12", "-3.25", "0.5"]:
        assert dfa.accepts(good), good
    for bad in ["-0", "01", "+1", ".5", "1.", "--1", "1e5", "NaN"]:
        assert not dfa.accepts(bad), bad


def test_state_bound_gives_clear_error(monkeypatch):
    import sgl_runtime.constrained.automata as automata

    monkeypatch.setattr(automata, "MAX_STATES", 50)
    with pytest.raises(ConstraintError, match="too large"):
        schema_to_dfa({"type": "string", "maxLength": 137})


def test_work_budget_bounds_compile_time():
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string", "maxLength": 40} for i in range(6)}}
    schema_to_dfa(schema)
    with pytest.raises(ConstraintError, match="too complex"):
        schema_to_dfa(schema, max_work_states=50)


@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"minLength": -1}, "minLength"),
        ({"maxItems": "3"}, "maxItems"),
        ({"enum": "x"}, "enum"),
        ({"properties": []}, "properties"),
        ({"required": "a"}, "required"),
        ({"pattern": 5}, "pattern"),
        ({"pattern": "("}, "pattern"),
        ({"items": 5}, "schema must be"),
        ({"allOf": []}, "allOf"),
        ({"multipleOf": 0}, "multipleOf"),
        ({"minimum": "a"}, "minimum"),
        ({"$ref": "#/$defs/missing"}, "ref"),
        ({"dependentRequired": {"a": "b"}}, "dependentRequired"),
        ("{not json", "JSON"),
        ([1], "schema must be"),
    ],
)
def test_invalid_schemas_raise_naming_the_problem(schema, keyword):
    with pytest.raises(ConstraintError, match=re.escape(keyword)):
        schema_to_fsm(schema)


def test_very_deep_schema_is_a_clear_error():
    schema: dict = {}
    for _ in range(3000):
        schema = {"not": schema}
    with pytest.raises(ConstraintError):
        schema_to_dfa(schema)


def _has_useful_cycle(dfa) -> bool:
    """Whether some cycle lies on a path from the start to an accepting state (infinite language)."""
    forward, back = {0}, set(dfa.finals)
    stack = [0]
    while stack:
        for _, t in dfa.edges[stack.pop()]:
            if t not in forward:
                forward.add(t)
                stack.append(t)
    changed = True
    while changed:
        changed = False
        for s, edges in enumerate(dfa.edges):
            if s not in back and any(t in back for _, t in edges):
                back.add(s)
                changed = True
    live = forward & back
    color: dict = {}

    def visit(s: int) -> bool:
        color[s] = 1
        for _, t in dfa.edges[s]:
            if t in live and (color.get(t) == 1 or (t not in color and visit(t))):
                return True
        color[s] = 2
        return False

    return any(s not in color and visit(s) for s in live)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "integer", "minimum": -5, "exclusiveMaximum": 120},
        {"type": "number", "minimum": 0, "maximum": 1},
        {"type": "number", "exclusiveMinimum": -2.5, "maximum": 7.25, "multipleOf": 0.25},
        {"type": "integer", "minimum": -3, "maximum": 3, "multipleOf": 3},
        {
            "type": "object",
            "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}},
            "required": ["age"],
            "additionalProperties": False,
        },
    ],
)
def test_bounded_numbers_have_finite_languages(schema):
    dfa = schema_to_dfa(schema)
    assert not dfa.is_empty() and not _has_useful_cycle(dfa)


def test_unbounded_types_are_infinite_only_through_new_digits():
    assert _has_useful_cycle(schema_to_dfa({"type": "integer"}))
    dfa = schema_to_dfa({"type": "integer", "minimum": 0}, integral_floats=True)
    assert dfa.accepts("1.0") and not dfa.accepts("1.00") and not dfa.accepts("1.000000")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 0, "maximum": 99},
        {"type": "integer"},
        {"type": "number"},
        {"type": "number", "minimum": -10, "maximum": 10},
        {},
        {"enum": [0, 1, 1.5, -5]},
        {"type": "number", "multipleOf": 0.5},
    ],
)
def test_each_number_value_has_one_spelling(schema):
    dfa = schema_to_dfa(schema, integral_floats=True)
    for bad in ["1.00", "-0.000", "-0.0", "-0", "01", "1.50", "00", "-05", "0.0000000000", "1.", "1e0"]:
        assert not dfa.accepts(bad), (schema, bad)
    expected = {"0": True, "-5": True, "1.5": True, "1.0": True, "0.0": True}
    for text in expected:
        assert dfa.accepts(text) == is_valid(schema, load_exact(text)), (schema, text)


def test_number_fractions_are_bounded_but_fit_every_float_repr():
    dfa = schema_to_dfa({"type": "number"}, integral_floats=True)
    for value in [0.1 + 0.2, 0.00012345678901234567, 1 / 3, -2 / 7, 123456.789, 9007199254740992.0]:
        assert dfa.accepts(json.dumps(value)), value
    assert not dfa.accepts("0." + "1" * 21)


def test_numeric_const_spellings_follow_json_dumps():
    dfa = schema_to_dfa({"const": -2.0}, integral_floats=True)
    assert dfa.accepts("-2") and dfa.accepts("-2.0") and not dfa.accepts("-2.00")
    dfa = schema_to_dfa({"enum": [0, 2.5]}, integral_floats=True)
    assert dfa.accepts("0") and dfa.accepts("0.0") and dfa.accepts("2.5")
    assert not any(dfa.accepts(t) for t in ["-0", "-0.0", "0.00", "2.50"])


def test_compile_constraint_passes_schema_budget_options():
    from sgl_runtime.constrained import compile_constraint
    from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer

    tok = load_qwen2_tokenizer()
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string", "maxLength": 40} for i in range(6)}}
    with pytest.raises(ConstraintError, match="too complex"):
        compile_constraint("json_schema", schema, tok, max_work_states=50)
    constraint = compile_constraint(
        "json_schema",
        {"type": "integer", "minimum": 0, "maximum": 99},
        tok,
        max_nesting_depth=1,
        max_work_states=10_000,
    )
    assert constraint.matcher() is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer"},
        {"type": "number"},
        {"type": "integer", "minimum": 3},
        {"type": "integer", "multipleOf": 7},
        {"const": 81.0},
        {"enum": [1.0, 2]},
        {},
    ],
)
def test_integral_values_are_plain_digits_by_default(schema):
    """Generated integers parse as ints (SGLang/XGrammar/llguidance emit digits); the ".0" spelling
    only with integral_floats=True. Both languages stay exact on everything they accept."""
    strict, loose = schema_to_dfa(schema), schema_to_dfa(schema, integral_floats=True)
    for value in [0, 3, 7, 14, 81, 2, 1, -5]:
        assert strict.accepts(json.dumps(float(value))) is False, (schema, value)
        assert strict.accepts(json.dumps(value)) == loose.accepts(json.dumps(value)) == is_valid(schema, value)
        assert loose.accepts(json.dumps(float(value))) == is_valid(schema, float(value))
    assert strict.accepts("1.5") == is_valid(schema, 1.5)


def test_applicator_wildcards_do_not_cut_structured_siblings_short():
    """anyOf: [{required: [b]}] leaves b's value free; intersected with the sibling `properties`,
    that wildcard must not bound b's structured value by the depth left at its level (the corpus's
    readthedocs schema: build.jobs.post_checkout rejected)."""
    strings = {"type": "array", "items": {"type": "string"}}
    inner = {"type": "object", "properties": {"c": strings}}
    schema = {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "anyOf": [{"required": ["z"]}, {"required": ["b"]}],
                "properties": {"b": inner, "z": {}},
            }
        },
    }
    dfa = schema_to_dfa(schema)
    assert dfa.accepts('{"a":{"b":{"c":["x"]}}}') and dfa.accepts('{"a":{"b":{"c":[]}}}')
    assert not dfa.accepts('{"a":{"b":{"c":[1]}}}') and not dfa.accepts('{"a":{}}')


def test_many_pattern_properties_split_keys_by_the_patterns_they_meet():
    """Eleven patternProperties (AWS IAM `Condition` operators): an undeclared key takes the schemas
    of exactly the patterns it matches; only the overlaps some key can meet become key classes."""
    ops = ["IpAddress", "ArnEquals", "ArnLike", "Bool", "DateEquals", "Null", "NumericEquals"]
    ops += ["StringEquals", "StringLike", "DateLessThan", "NumericLessThan"]
    patterns = {f"^(ForAnyValue:)?{op}(IfExists)?$": {"type": "integer", "maximum": i} for i, op in enumerate(ops)}
    patterns["^String"] = {"type": "integer", "minimum": 5}  # overlaps two of them
    schema = {"type": "object", "patternProperties": patterns, "additionalProperties": False, "maxProperties": 2}
    dfa = schema_to_dfa(schema)
    cases = [
        ({"Bool": 3}, True),
        ({"Bool": 4}, False),
        ({"ForAnyValue:NullIfExists": 5}, True),
        ({"StringEquals": 7}, True),
        ({"StringEquals": 4}, False),
        ({"StringLike": 8}, True),
        ({"StringLike": 9}, False),
        ({"Stringy": 6}, True),
        ({"Other": 1}, False),
        ({"IpAddress": 0, "ArnLike": 2}, True),
    ]
    for instance, valid in cases:
        assert dfa.accepts(compact_json(instance, schema)) == valid, instance
