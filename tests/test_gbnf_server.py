"""GBNF through the server as SGLang users send it: `ebnf` on /generate and the OpenAI routes,
`grammar_syntax`, 400s for bad grammars, and 200 samples per shipped grammar at temperature 1
on the random-weight demo model, each parsed by the grammar's own parser."""

from __future__ import annotations

import json

import lark
import openai
import pytest
import requests

from sgl_runtime.constrained.grammar.source import GRAMMAR_DIR, build_parser

SAMPLES = 200
MAX_NEW_TOKENS = {"json": 12, "arithmetic": 8}  # masks of random states cost ~25 ms each on CPU


def generate(server, params: dict, text: str = "Out:") -> requests.Response:
    body = {"text": text, "sampling_params": params}
    return requests.post(f"{server.url}/generate", json=body, headers=server.headers, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MAX_NEW_TOKENS))
def test_200_samples_per_shipped_gbnf_grammar_parse(server, name):
    text = (GRAMMAR_DIR / f"{name}.gbnf").read_text()
    params = {"ebnf": text, "temperature": 1.0, "n": SAMPLES, "max_new_tokens": MAX_NEW_TOKENS[name], "seed": 7}
    out = generate(server, params, text=f"{name} sample:")
    assert out.status_code == 200, out.text
    results = out.json()
    assert len(results) == SAMPLES
    own = build_parser(f"{name}.gbnf")  # the GBNF's own parser (the lowered lark grammar)
    reference = lark.Lark((GRAMMAR_DIR / f"{name}.lark").read_text(), parser="lalr")
    for r in results:
        assert r["meta_info"]["finish_reason"]["type"] == "stop", r  # the grammar ended it (EOS)
        own.parse(r["text"])
        reference.parse(r["text"])
        if name == "json":
            json.loads(r["text"])


def test_inline_gbnf_and_forced_syntax(server):
    gbnf = 'root ::= "[" item ("," item)* "]"\nitem ::= [0-9]{1,2} "=" [a-c]\n'
    for syntax in (None, "gbnf"):
        params = {"ebnf": gbnf, "temperature": 1.0, "n": 4, "max_new_tokens": 24, "seed": 3}
        if syntax:
            params["grammar_syntax"] = syntax
        for r in generate(server, params).json():
            assert r["meta_info"]["finish_reason"]["type"] == "stop", r
            assert build_parser(gbnf).parse(r["text"]) is not None


@pytest.mark.parametrize(
    "params, message",
    [
        ({"ebnf": 'root ::= "a" missing'}, "line 1 column 14: rule 'missing' is used but never defined"),
        ({"ebnf": 'root ::= "a"', "grammar_syntax": "lark"}, "invalid lark grammar"),
        ({"ebnf": 'root ::= "a"', "grammar_syntax": "yacc"}, "grammar_syntax: must be 'gbnf' or 'lark'"),
        ({"regex": "a", "grammar_syntax": "gbnf"}, "grammar_syntax: is only meaningful with ebnf"),
    ],
)
def test_bad_gbnf_is_a_400(server, params, message):
    out = generate(server, {"max_new_tokens": 4, **params})
    assert out.status_code == 400, out.text
    assert message in out.text


def test_openai_routes_take_ebnf(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key or "EMPTY")
    gbnf = 'root ::= ("yes" | "no") "!"'
    done = client.completions.create(
        model="demo",
        prompt="Answer:",
        max_tokens=8,
        temperature=1.0,
        extra_body={"ebnf": gbnf, "grammar_syntax": "gbnf"},
    )
    assert done.choices[0].text in ("yes!", "no!")
    chat = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "ok?"}], max_tokens=8, extra_body={"ebnf": gbnf}
    )
    assert chat.choices[0].message.content in ("yes!", "no!")


def test_frontend_gen_takes_a_gbnf_grammar(server):
    import sgl_lang as sgl

    gbnf = 'root ::= "(" [0-9]{1,3} ", " [0-9]{1,3} ")"'

    @sgl.function
    def point(s):
        s += "A point: " + sgl.gen("p", grammar=gbnf, max_tokens=16, temperature=1.0)
        s += " Again: " + sgl.gen("q", grammar=gbnf, grammar_syntax="gbnf", max_tokens=16)

    state = point.run(backend=sgl.RuntimeEndpoint(server.url))
    for name in ("p", "q"):
        assert build_parser(gbnf).parse(state[name]) is not None, state[name]
    with pytest.raises(ValueError, match="grammar_syntax must be 'gbnf' or 'lark'"):
        sgl.gen("x", grammar=gbnf, grammar_syntax="bnf")
