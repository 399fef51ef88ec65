"""Unit tests of the server's pure parts: request splitting, the detokenizer's stop-string
handling, and OpenAI logprob shaping (no server process)."""

from __future__ import annotations

import pytest

from sgl_runtime.detokenizer.detokenizer_manager import DetokenizerManager, partial_stop_suffix_len
from sgl_runtime.io_struct import BatchTokenIDOut, GenerateReqInput, ReqTokenOutput
from sgl_runtime.model_loader.demo_tokenizer import load_qwen2_tokenizer
from sgl_runtime.sampling_params import InvalidRequestError
from sgl_runtime.server.generate_request import parse_generate_body, split_generate_request
from sgl_runtime.server.openai_responses import StreamBuilder, completion_logprobs


@pytest.fixture(scope="module")
def tokenizer():
    return load_qwen2_tokenizer()


def test_split_single_and_batch():
    singles, is_batch = split_generate_request(GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 2}))
    assert not is_batch and singles[0].text == "hi" and singles[0].sampling_params == {"max_new_tokens": 2}
    obj = GenerateReqInput(input_ids=[[1, 2], [3]], rid=["a", "b"], return_logprob=[True, False])
    singles, is_batch = split_generate_request(obj)
    assert is_batch and [s.rid for s in singles] == ["a", "b"] and [s.return_logprob for s in singles] == [True, False]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"text": "x", "nope": 1}, ["unknown", "nope"]),
        ({"text": ["a", "b"], "rid": "same"}, ["rid", "list"]),
        ({"text": "a", "rid": ["x"]}, ["rid", "single"]),
        ({"input_ids": [1, "2"]}, ["input_ids"]),
        ({"text": "x", "top_logprobs_num": -1}, ["top_logprobs_num"]),
    ],
)
def test_split_rejects(body, words):
    with pytest.raises(InvalidRequestError) as err:
        split_generate_request(parse_generate_body(body))
    assert all(w in str(err.value) for w in words)


def test_partial_stop_suffix_len():
    assert partial_stop_suffix_len("hello wor", ("world",)) == 3
    assert partial_stop_suffix_len("hello", ("world",)) == 0
    assert partial_stop_suffix_len("abc</", ("</s>", "c<")) == 2
    assert partial_stop_suffix_len("", ("x",)) == 0


def _out(rid, ids, finished=None, stops=()):
    return ReqTokenOutput(
        rid=rid,
        new_output_ids=ids,
        finished_reason=finished,
        prompt_tokens=1,
        completion_tokens=len(ids),
        cached_tokens=0,
        stop_strs=stops,
    )


def test_detokenizer_streams_without_leaking_a_stop_string(tokenizer):
    stop = "is 42"  # spans several tokens
    ids = tokenizer.encode("The answer is 42. More")
    manager = DetokenizerManager(tokenizer)
    text, fed = "", []
    for tid in ids:
        fed.append(tid)
        done = stop in tokenizer.decode(fed)  # what the scheduler checks before finishing
        finished = {"type": "stop", "matched": stop} if done else None
        text += manager.process(BatchTokenIDOut([_out("r", [tid], finished, (stop,))])).outputs[0].text_delta
        assert not any(text.endswith(stop[:k]) for k in range(1, len(stop) + 1)), text
        if done:
            break
    assert text == "The answer "
    assert manager.states == {}


def test_detokenizer_never_splits_utf8(tokenizer):
    ids = tokenizer.encode("日本語 ✓ emoji 🎉")
    manager = DetokenizerManager(tokenizer)
    pieces = [manager.process(BatchTokenIDOut([_out("u", [t])])).outputs[0].text_delta for t in ids]
    pieces.append(manager.process(BatchTokenIDOut([_out("u", [], {"type": "length"})])).outputs[0].text_delta)
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == "日本語 ✓ emoji 🎉"


def test_detokenizer_keeps_the_first_tokens_space_with_sentencepiece():
    """SentencePiece drops a token's leading space when it is decoded alone; the prompt tail fixes that."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    sp = Tokenizer(models.WordLevel({"<unk>": 0, "\u2581Hello": 1, "\u2581world": 2, "!": 3}, unk_token="<unk>"))
    sp.pre_tokenizer, sp.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok = PreTrainedTokenizerFast(tokenizer_object=sp, unk_token="<unk>")
    out = _out("s", [2, 3], {"type": "length"})
    out.prompt_tail_ids = (1,)
    assert DetokenizerManager(tok).process(BatchTokenIDOut([out])).outputs[0].text_delta == " world!"


def test_detokenizer_logprob_texts(tokenizer):
    ids = tokenizer.encode("hi there")
    out = _out("l", ids, {"type": "length"})
    out.new_output_token_logprobs = [(-0.5, ids[0]), (-1.0, ids[1])]
    out.new_output_top_logprobs = [[(-0.5, ids[0])], None]
    meta = DetokenizerManager(tokenizer).process(BatchTokenIDOut([out])).outputs[0].meta_info
    assert meta["output_token_logprobs"] == [[-0.5, ids[0], "hi"], [-1.0, ids[1], " there"]]
    assert meta["output_top_logprobs"] == [[[-0.5, ids[0], "hi"]], None]


def test_completion_logprobs_shape():
    lp = completion_logprobs([[None, 1, "a"], [-1.0, 2, "bc"]], [None, [[-1.0, 2, "bc"], [-2.0, 3, "d"]]])
    assert lp == {
        "tokens": ["a", "bc"],
        "token_logprobs": [None, -1.0],
        "top_logprobs": [None, {"bc": -1.0, "d": -2.0}],
        "text_offset": [0, 1],
    }


def test_stream_builder_deltas():
    builder = StreamBuilder(model="m", chat=True, logprobs=False)
    first = builder.chunk({"text": "Hel", "meta_info": {"finish_reason": None}})
    second = builder.chunk({"text": "Hello", "meta_info": {"finish_reason": {"type": "length"}}})
    assert first["choices"][0]["delta"] == {"content": "Hel", "role": "assistant"}
    assert second["choices"][0]["delta"] == {"content": "lo"} and second["choices"][0]["finish_reason"] == "length"
