"""Exact masks and transitions on tiny hand-made vocabularies (byte-level and SentencePiece)."""

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from sgl_runtime.constrained import ConstraintError, compile_constraint
from sgl_runtime.constrained.byte_dfa import ByteDFA
from sgl_runtime.constrained.constraint import DFAConstraint
from sgl_runtime.constrained.vocabulary import Vocabulary, gpt2_unicode_to_byte

EOS = 4
# ids:     0     1     2      3       4 (EOS)  5      6 (special)  7, 8 padded
TOKENS = [b"a", b"b", b"ab", b"abc", None, b"c", None]


def tiny(pattern: str) -> DFAConstraint:
    vocab = Vocabulary(TOKENS + [None, None], eos_token_ids=[EOS])
    return DFAConstraint(ByteDFA.from_regex(pattern), vocab)


def allowed_ids(mask: np.ndarray) -> list[int]:
    return [int(i) for i in np.nonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))[0]]


def test_exact_masks_and_transitions():
    c = tiny("ab*c")
    m = c.matcher()
    assert allowed_ids(m.bitmask()) == [0, 2, 3]  # a, ab, abc
    ids, nxt = c.index.allowed(m.state)
    assert list(ids) == [0, 2, 3]
    assert c.dfa.accepting[nxt[2]] and not c.dfa.accepting[nxt[0]] and nxt[0] == nxt[1]
    m.advance(0)
    assert allowed_ids(m.bitmask()) == [1, 5]  # b or c; EOS not yet
    m.advance(1)
    m.advance(1)
    assert allowed_ids(m.bitmask()) == [1, 5]
    m.advance(5)
    assert m.is_accepting() and m.is_terminated()
    assert allowed_ids(m.bitmask()) == [EOS]  # forced EOS: nothing else allowed
    m.advance(EOS)
    assert m.is_terminated() and m.forced_token_ids() == []
    with pytest.raises(ConstraintError):
        m.advance(0)


def test_eos_only_in_accepting_states_and_padded_ids_masked():
    c = tiny("a(bc)?")
    m = c.matcher()
    assert allowed_ids(m.bitmask()) == [0, 2, 3]  # a, ab, abc
    with pytest.raises(ConstraintError, match="EOS"):
        m.advance(EOS)
    m.advance(0)
    assert allowed_ids(m.bitmask()) == [1, EOS]  # accepting: EOS allowed, b continues
    assert not m.is_terminated()
    assert all(i < 7 for i in allowed_ids(c.index.bitmask(c.dfa.initial)))
    assert c.vocabulary.num_words == 1 and c.vocabulary.size == 9


def test_disallowed_and_special_tokens_raise():
    m = tiny("ab").matcher()
    for bad in (1, 5, 6, 7, 100, -1):
        with pytest.raises(ConstraintError):
            m.copy().advance(bad)


def test_copy_is_independent():
    m = tiny("a+").matcher()
    m.advance(0)
    other = m.copy()
    other.advance(EOS)
    assert other.is_terminated() and not m.is_terminated()


def test_accepts_and_empty_language():
    c = tiny("(ab|c)+")
    assert c.accepts("abcab") and not c.accepts("abca") and not c.accepts("")
    tok = _byte_level_tokenizer()
    with pytest.raises(ConstraintError, match="matches no string"):
        compile_constraint("regex", "[^\\s\\S]", tok)


def _byte_level_tokenizer() -> PreTrainedTokenizerFast:
    alphabet = {b: chr(cp) for cp, b in gpt2_unicode_to_byte().items()}
    pieces = [bytes([b]) for b in range(256)] + [b" a", b"ab", " é".encode()]
    vocab = {"".join(alphabet[x] for x in p): i for i, p in enumerate(pieces)}
    vocab["<eos>"] = len(vocab)
    merges = [
        (alphabet[32], alphabet[97]),
        (alphabet[97], alphabet[98]),
        (alphabet[32], alphabet[0xC3]),
        (alphabet[32] + alphabet[0xC3], alphabet[0xA9]),
    ]
    vocab[alphabet[32] + alphabet[0xC3]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def _sentencepiece_tokenizer() -> PreTrainedTokenizerFast:
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "\u2581a", "b", "ab", "é"]
    tok = Tokenizer(
        models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[], byte_fallback=True, unk_token="<unk>")
    )
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_byte_level_vocabulary():
    tok = _byte_level_tokenizer()
    vocab = Vocabulary.from_tokenizer(tok, vocab_size=300)
    assert vocab.kind == "byte_level" and vocab.size == 300
    assert vocab.token_bytes[:256] == [bytes([b]) for b in range(256)]
    assert vocab.token_bytes[256:259] == [b" a", b"ab", " é".encode()]
    assert vocab.token_bytes[259] is None and vocab.eos_token_ids == (259,)  # EOS excluded from text
    assert vocab.token_bytes[260] == b" \xc3"  # half a character is still a token
    assert all(b is None for b in vocab.token_bytes[261:])  # padded ids
    assert Vocabulary.from_tokenizer(tok, vocab_size=300) is vocab  # cached per tokenizer
    narrow = Vocabulary.from_tokenizer(tok, vocab_size=257)  # a logit dimension below len(tokenizer)
    assert narrow.size == 257 and narrow.token_bytes[256] == b" a" and narrow.eos_token_ids == ()


def test_vocabulary_flags_per_token():
    vocab = Vocabulary(
        [b"a,", b":", None, b"", b'"k":', b"\xff,]"], eos_token_ids=[2]
    )  # a missing and an empty token hold nothing
    assert vocab.holding(b",").tolist() == [True, False, False, False, False, True]
    assert vocab.holding(b":").tolist() == [False, True, False, False, True, False]
    assert vocab.holding(b",]").tolist() == [False, False, False, False, False, True]
    assert vocab.holding(b",") is vocab.holding(b",")  # kept: one scan per vocabulary
    assert not vocab.holding(b",").flags.writeable
    assert vocab.first_bytes.tolist() == [ord("a"), ord(":"), -1, -1, ord('"'), 0xFF]
    assert vocab.max_token_len() == 4


def test_sentencepiece_vocabulary():
    tok = _sentencepiece_tokenizer()
    vocab = Vocabulary.from_tokenizer(tok)
    assert vocab.kind == "sentencepiece"
    assert vocab.token_bytes[:3] == [None, None, None]
    assert vocab.token_bytes[3 + 0x41] == b"A" and vocab.token_bytes[3 + 0xC3] == b"\xc3"
    assert vocab.token_bytes[259:264] == [b" ", b" a", b"b", b"ab", "é".encode()]
    assert vocab.eos_token_ids == (2,)
    c = compile_constraint("regex", " ab", tok)
    m = c.matcher()
    assert allowed_ids(m.bitmask()) == [3 + 0x20, 259, 260]  # <0x20>, ▁, ▁a
    m.advance(260)
    assert allowed_ids(m.bitmask()) == [3 + 0x62, 261]
    m.advance(261)
    assert allowed_ids(m.bitmask()) == [2]


def test_multibyte_tokens_split_characters():
    tok = _byte_level_tokenizer()
    c = compile_constraint("regex", " é+", tok)
    m = c.matcher()
    assert allowed_ids(m.bitmask()) == [32, 258, 260]  # ' ', ' é', ' \xc3'
    m.advance(260)
    assert allowed_ids(m.bitmask()) == [0xA9]
    m.advance(0xA9)
    assert allowed_ids(m.bitmask()) == [0xC3, 259]


def test_choices_tiny_and_errors():
    tok = _byte_level_tokenizer()
    c = compile_constraint("choices", ["ab", "a b", "é"], tok)
    assert c.accepts("ab") and c.accepts("é") and not c.accepts("a")
    assert allowed_ids(c.matcher().bitmask()) == [97, 0xC3, 257]
    for bad in ([], "ab", [1], None):
        with pytest.raises(ConstraintError):
            compile_constraint("choices", bad, tok)
    with pytest.raises(ConstraintError, match="unknown constraint kind"):
        compile_constraint("xml", "a", tok)
    with pytest.raises(ConstraintError, match="invalid regex"):
        compile_constraint("regex", "(a", tok)
    with pytest.raises(ConstraintError, match="unsupported regex"):
        compile_constraint("regex", "(a)\\1", tok)


def test_dfa_size_bound():
    with pytest.raises(ConstraintError, match="too large"):
        ByteDFA.from_regex("[a-z]{200}", max_states=100)


def test_utf8_validity_of_any_char():
    dfa = ByteDFA.from_regex(".*")
    for bad in (b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x9f\xbf", b"\xff"):
        assert not dfa.accepts(bad)
    for good in ("\x00", "\u07ff", "\ud7ff", "\ue000", "\U0010ffff", "日本"):
        assert dfa.accepts(good)


def test_json_schema_dispatch_accepts_dict_string_and_bool():
    tok = _byte_level_tokenizer()
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    for spec in (schema, __import__("json").dumps(schema)):
        c = compile_constraint("json_schema", spec, tok)
        assert c.accepts('{"a":12}') and not c.accepts('{"a":"x"}') and not c.accepts('{"a": 12}')
    assert compile_constraint("json_schema", True, tok).accepts("[1]")
    spaced = compile_constraint("json_schema", schema, tok, whitespace=r"[ ]?")
    assert spaced.accepts('{"a": 12}')
    with pytest.raises(ConstraintError, match="not valid JSON"):
        compile_constraint("json_schema", "{not json", tok)
    with pytest.raises(ConstraintError, match="unknown json_schema option"):
        compile_constraint("json_schema", schema, tok, colour="red")
    with pytest.raises(ConstraintError):
        compile_constraint("json_schema", 42, tok)


def test_tiktoken_vocabulary():
    import tiktoken

    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"ab": 256, b" \xc3": 257})
    enc = tiktoken.Encoding("tiny", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 258})
    vocab = Vocabulary.from_tokenizer(enc, vocab_size=264)
    assert vocab.kind == "tiktoken" and vocab.size == 264 and vocab.eos_token_ids == (258,)
    assert vocab.token_bytes[256:259] == [b"ab", b" \xc3", None]
    c = compile_constraint("regex", "ab", enc)
    assert allowed_ids(c.matcher().bitmask()) == [97, 256]
    assert c.matcher().forced_token_ids() == [256]  # canonical: "ab", not "a" "b"
    assert Vocabulary.from_tokenizer(enc, eos_token_ids=[]).eos_token_ids == ()
