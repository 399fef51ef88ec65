"""`sgl.gen(..., n=k)` through RuntimeEndpoint and run_batch, on the shared demo-model server: the
variable is the list of the k texts (SGLang's interpreter shape for a list completion), each equal
to what /generate answers for the same request; the program continues with the first."""

import pytest
import requests

import sgl_lang as sgl

PARAMS = {"max_new_tokens": 6, "temperature": 1.0, "seed": 7}


@pytest.fixture(scope="module")
def backend(server):
    return sgl.RuntimeEndpoint(server.url)


def _direct(backend, text: str, n: int) -> list[dict]:
    body = {"text": text, "sampling_params": {**PARAMS, "n": n}}
    res = requests.post(backend.base_url + "/generate", json=body, timeout=120)
    assert res.status_code == 200, res.text
    return res.json()


@sgl.function
def two_gens(s, question):
    s += "Q: " + question + "\nA:"
    s += sgl.gen("answers", max_tokens=6, temperature=1.0, seed=7, n=3)
    s += "\nThen:" + sgl.gen("after", max_tokens=3, temperature=0)


def test_gen_n_gives_the_n_texts_and_continues_with_the_first(backend):
    state = two_gens.run(question="colour of the sky?", backend=backend)
    answers = state["answers"]
    direct = _direct(backend, "Q: colour of the sky?\nA:", 3)
    assert answers == [d["text"] for d in direct]
    assert len(set(answers)) > 1  # three different samples, not one repeated
    metas = state.get_meta_info("answers")
    assert [m["completion_tokens"] for m in metas] == [d["meta_info"]["completion_tokens"] for d in direct]
    assert state.text() == "Q: colour of the sky?\nA:" + answers[0] + "\nThen:" + state["after"]


def test_run_batch_with_n(backend):
    questions = ["first?", "second one?"]
    states = two_gens.run_batch([{"question": q} for q in questions], backend=backend)
    for q, state in zip(questions, states):
        assert state["answers"] == [d["text"] for d in _direct(backend, f"Q: {q}\nA:", 3)]


def test_gen_n_refuses_to_stream(backend):
    state = two_gens.run(question="stream?", backend=backend, stream=True)
    error = state.error()
    assert isinstance(error, ValueError) and "n > 1 cannot stream" in str(error)


def test_openai_backend_gives_the_same_list(server, backend):
    completion = sgl.OpenAI(backend.model_info["served_model_name"], base_url=server.url + "/v1", is_chat_model=False)
    state = two_gens.run(question="colour of the sky?", backend=completion)
    assert state["answers"] == two_gens.run(question="colour of the sky?", backend=backend)["answers"]
    assert state.text().startswith("Q: colour of the sky?\nA:" + state["answers"][0] + "\nThen:")
