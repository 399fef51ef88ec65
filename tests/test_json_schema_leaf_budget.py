"""The work budget of the grammar form's flat leaves: an object's or array's flat automaton is
first tried with a small budget (LEAF_FIRST_STATES; past it, rules), and only a build that then
fails is made again with the whole budget; a string automaton charges the states it builds before
building them, also when it was kept from an earlier compile."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from sgl_runtime.constrained import automata_memo
from sgl_runtime.constrained.automata import charged, work_budget
from sgl_runtime.constrained.errors import ConstraintError
from sgl_runtime.constrained.json_schema import grammar_form, language, strings
from sgl_runtime.constrained.json_schema.language import compile_schema

LONG = {
    "type": "object",
    "properties": {"statement": {"type": "string", "minLength": 1, "maxLength": 10_000}},
    "required": ["statement"],
    "additionalProperties": False,
}
# under oneOf a flat automaton spells every escape (an exact complement needs them): 70,000 states
ONE_OF = {
    "oneOf": [
        {"type": "object", "properties": {"static": LONG}, "required": ["static"], "additionalProperties": False},
        {"type": "object", "properties": {"linked": LONG}, "required": ["linked"], "additionalProperties": False},
    ]
}


def test_a_long_string_in_an_exact_context_is_counted_not_spelled(monkeypatch):
    sizes = []
    encode = strings.encode_content

    def spy(content, full_escapes=True, minimal=True):
        built = encode(content, full_escapes, minimal)  # raises on its charge before building
        sizes.append(content.num_states)
        return built

    monkeypatch.setattr(strings, "encode_content", spy)
    grammar = compile_schema(ONE_OF)
    assert max(sizes, default=0) < 1_000  # the 10,001-state content was refused by its charge, never built
    validator = Draft202012Validator(ONE_OF)
    for instance in [
        {"static": {"statement": "x" * 4_000}},
        {"static": {"statement": "\\" * 2_000}},
        {"linked": {"statement": "a\u0001b"}},
        {"linked": {"statement": ""}},
        {"static": {"statement": "y"}, "linked": {"statement": "y"}},
    ]:
        text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
        assert grammar.accepts(text) == validator.is_valid(instance), text[:60]


def test_a_kept_string_automaton_charges_what_its_build_did():
    automata_memo.clear()
    spent = []
    for _ in range(2):
        with work_budget(10**9):
            before = charged()
            strings.string_dfa(0, 300, (), (), True)
            spent.append(charged() - before)
    assert spent[0] == spent[1] > 300  # the second call is a hit of the kept automaton


def test_a_charge_past_the_budget_refuses_before_building():
    automata_memo.clear()
    with work_budget(5_000), pytest.raises(ConstraintError, match="automaton states in total"):
        strings.string_dfa(0, 10_000, (), (), True)


def _builds(monkeypatch, refuse_first: bool) -> list:
    """The leaf budgets of the grammar builds of a compile, the first of which refuses (as a rules
    path that cannot say what a cut leaf would have) when `refuse_first`."""
    builds = []
    build = grammar_form.GrammarBuilder.build

    def recording(self, schema):
        builds.append(self.first_budget)
        grammar = build(self, schema)
        if refuse_first and len(builds) == 1:
            raise ConstraintError("contains: not supported on arrays too large for one automaton (grammar form)")
        return grammar

    monkeypatch.setattr(grammar_form.GrammarBuilder, "build", recording)
    monkeypatch.setattr(language, "LEAF_FIRST_STATES", 1)
    return builds


CLOSED_INSIDE = {
    "type": "object",
    "properties": {"v": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}},
    "additionalProperties": {"type": "object"},
}


def test_a_build_whose_leaves_were_cut_short_is_made_again_with_the_whole_budget(monkeypatch):
    builds = _builds(monkeypatch, refuse_first=True)
    grammar = language.schema_to_grammar(CLOSED_INSIDE)
    assert builds == [1, None]
    assert grammar.accepts('{"v":{"a":1},"w":{"x":[]}}') and not grammar.accepts('{"v":{"b":1}}')


def test_a_build_refused_without_a_cut_leaf_is_not_made_again(monkeypatch):
    builds = _builds(monkeypatch, refuse_first=True)
    with pytest.raises(ConstraintError, match="contains"):
        language.schema_to_grammar({"type": "object", "additionalProperties": {"type": "object"}})
    assert builds == [1]


def test_the_first_budget_is_for_objects_and_arrays_only(monkeypatch):
    builds = _builds(monkeypatch, refuse_first=False)
    schema = {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[a-z]{2,5}@[a-z]+$"}}
    grammar = language.schema_to_grammar(schema)  # a scalar leaf has no rules to fall back to
    assert builds == [1]
    assert grammar.accepts('{"k":"ab@cd"}') and not grammar.accepts('{"k":"a@cd"}')
