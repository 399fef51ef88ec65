"""A tokenizer's vocabulary as raw bytes per token id, the alphabet every constraint masks over.

Offers (stable interface, used by the token index, jump-forward and the lark grammar engine):

- `Vocabulary.from_tokenizer(tokenizer, vocab_size=None, eos_token_ids=None)`, cached per
  tokenizer object: `tokenizer` is a Hugging Face tokenizer (byte-level BPE in the GPT-2
  alphabet such as Qwen2.5/Llama-3; SentencePiece with `▁` and `<0xNN>` byte fallback such as
  Llama-2/Mistral), a tiktoken `Encoding`, or any tokenizer whose `convert_ids_to_tokens`
  returns bytes.
- `vocab.size`: the mask width: `vocab_size` (the model's logit dimension; ids past the tokenizer are
  padding, always masked; a dimension below len(tokenizer) drops the ids it cannot produce), else len(tokenizer).
- `vocab.token_bytes[i]`: raw bytes of token i, or None when it can never be produced as
  text (special and added tokens, EOS, ids past the tokenizer, tokens decoding to nothing).
- `vocab.eos_token_ids`: sorted tuple of EOS ids (allowed only where a constraint accepts).
- `vocab.num_words`: ceil(size / 32), the length of a packed int32 bitmask.
- `vocab.byte_table()`: (unique byte strings, token -> unique index) for vectorised walks.
- `vocab.walk_table()`: the unique strings as a column-major byte matrix for level-wise walks.
- `vocab.encode(text)`: the tokenizer's canonical ids for `text` (no special tokens added).
- `vocab.ids_for_bytes(data)`: ids whose bytes equal `data`.
"""

from __future__ import annotations

import bisect
import re
import threading
import weakref
from functools import cached_property
from typing import Any, Iterable, Optional

import numpy as np

from sgl_runtime.constrained.walk_table import WalkTable

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPIECE_SPACE = "\u2581"


def gpt2_unicode_to_byte() -> dict[int, int]:
    """The inverse of GPT-2's bytes_to_unicode: printable stand-in code point -> raw byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {b: b for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return {cp: b for b, cp in table.items()}


class Vocabulary:
    """Raw bytes of every token id, sized to the model's logit dimension."""

    def __init__(
        self,
        token_bytes: list[Optional[bytes]],
        eos_token_ids: Iterable[int],
        tokenizer: Any = None,
        kind: str = "bytes",
    ) -> None:
        self.token_bytes = token_bytes
        self.size = len(token_bytes)
        self.eos_token_ids = tuple(sorted({int(i) for i in eos_token_ids if 0 <= int(i) < self.size}))
        self.tokenizer = tokenizer
        self.kind = kind
        self._holding: dict[bytes, np.ndarray] = {}  # holding(data), per data

    # ---- public -------------------------------------------------------------------------

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, vocab_size: Optional[int] = None, eos_token_ids: Optional[Iterable[int]] = None
    ) -> "Vocabulary":
        """The (cached) vocabulary of `tokenizer`, `vocab_size` wide, with these EOS ids."""
        eos = tuple(sorted(set(eos_token_ids))) if eos_token_ids is not None else None
        per_tok = _CACHE.setdefault(tokenizer, {})
        key = (vocab_size, eos)
        if key not in per_tok:
            per_tok[key] = _build(tokenizer, vocab_size, eos)
        return per_tok[key]

    @property
    def num_words(self) -> int:
        return (self.size + 31) // 32

    def byte_table(self) -> tuple[list[bytes], np.ndarray]:
        """Deduplicated non-empty token byte strings and, per token id, its index there (-1: none)."""
        return self._byte_table

    def walk_table(self) -> "WalkTable":
        """Unique token strings sorted by length (longest first) as a [max_len, n] byte matrix."""
        return self._walk_table

    def encode(self, text: str) -> list[int]:
        """The tokenizer's canonical token ids for `text`, without special tokens."""
        tok = self.tokenizer
        if tok is None:
            raise ValueError("this vocabulary has no tokenizer to encode with")
        if hasattr(tok, "decode_single_token_bytes"):  # tiktoken.Encoding
            return list(tok.encode_ordinary(text))
        return list(tok.encode(text, add_special_tokens=False))

    def ids_for_bytes(self, data: bytes) -> list[int]:
        """Token ids whose raw bytes are exactly `data`."""
        return self._ids_by_bytes.get(data, [])

    def max_token_len(self) -> int:
        return self._max_token_len

    def holding(self, data: bytes) -> np.ndarray:
        """Per token id, whether its bytes contain `data` (read-only, kept for this vocabulary:
        callers pass a few fixed delimiters such as b"," and b":")."""
        flags = self._holding.get(data)
        if flags is None:
            flags = np.array([bool(b) and data in b for b in self.token_bytes], dtype=bool)
            flags.flags.writeable = False
            self._holding[data] = flags
        return flags

    @cached_property
    def first_bytes(self) -> np.ndarray:
        """Per token id, its first byte (-1 for a token without bytes), read-only."""
        out = np.array([b[0] if b else -1 for b in self.token_bytes], dtype=np.int16)
        out.flags.writeable = False
        return out

    def begins_a_token(self, prefix: bytes) -> bool:
        """Whether some token's bytes begin with `prefix`."""
        ordered = self._sorted_bytes
        i = bisect.bisect_left(ordered, prefix)
        return i < len(ordered) and ordered[i].startswith(prefix)

    def ids_beginning_with(self, prefix: bytes) -> list[int]:
        """Token ids whose raw bytes begin with `prefix` (non-empty)."""
        ordered = self._sorted_bytes
        i = bisect.bisect_left(ordered, prefix)
        out: list[int] = []
        while i < len(ordered) and ordered[i].startswith(prefix):
            out += self._ids_by_bytes[ordered[i]]
            i += 1
        return out

    def ids_opening_key(self, rest: bytes) -> list[int]:
        """Token ids spelling `[ws or ,]* "` then a prefix of `rest`, or `rest` and more: the tokens
        that begin an object key token (see grammar/frames.py) whose key, after its quote, is `rest`."""
        posts, ids = self._quoted_tokens
        out: list[int] = []
        for k in range(len(rest)):
            for i in range(bisect.bisect_left(posts, rest[:k]), bisect.bisect_right(posts, rest[:k])):
                out += ids[i]
        i = bisect.bisect_left(posts, rest)
        while i < len(posts) and posts[i].startswith(rest):
            out += ids[i]
            i += 1
        return out

    # ---- private ------------------------------------------------------------------------

    @cached_property
    def _byte_table(self) -> tuple[list[bytes], np.ndarray]:
        index: dict[bytes, int] = {}
        token_to_unique = np.full(self.size, -1, dtype=np.int32)
        for i, b in enumerate(self.token_bytes):
            if b:
                token_to_unique[i] = index.setdefault(b, len(index))
        return list(index), token_to_unique

    @cached_property
    def _max_token_len(self) -> int:
        return max((len(b) for b in self._byte_table[0]), default=0)

    @cached_property
    def _sorted_bytes(self) -> list[bytes]:
        return sorted(self._byte_table[0])

    @cached_property
    def _quoted_tokens(self) -> tuple[list[bytes], list[list[int]]]:
        """(sorted texts after the first quote, their token ids) of the tokens that hold only
        whitespace and commas before a quote."""
        by_post: dict[bytes, list[int]] = {}
        for data in self._byte_table[0]:
            q = data.find(b'"')
            if q >= 0 and not data[:q].strip(b" \t\n\r,"):
                by_post.setdefault(data[q + 1 :], []).extend(self._ids_by_bytes[data])
        posts = sorted(by_post)
        return posts, [by_post[p] for p in posts]

    @cached_property
    def _walk_table(self) -> "WalkTable":
        return WalkTable(*self._byte_table)

    @cached_property
    def _ids_by_bytes(self) -> dict[bytes, list[int]]:
        out: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if b:
                out.setdefault(b, []).append(i)
        return out


class _PerTokenizerCache:
    """Vocabularies keyed by tokenizer identity, dropped when the tokenizer is collected."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, dict]] = {}
        self._lock = threading.Lock()

    def setdefault(self, tokenizer: Any, default: dict) -> dict:
        with self._lock:
            entry = self._entries.get(id(tokenizer))
            if entry is not None and entry[0]() is tokenizer:
                return entry[1]
            try:
                ref = weakref.ref(tokenizer, lambda _r, k=id(tokenizer): self._entries.pop(k, None))
            except TypeError:
                ref = lambda t=tokenizer: t
            self._entries[id(tokenizer)] = (ref, default)
            return default


_CACHE = _PerTokenizerCache()


def _build(tokenizer: Any, vocab_size: Optional[int], eos: Optional[tuple]) -> Vocabulary:
    if hasattr(tokenizer, "decode_single_token_bytes"):
        raw, excluded, kind, default_eos = _tiktoken_bytes(tokenizer)
    else:
        raw, excluded, kind, default_eos = _hf_bytes(tokenizer)
    eos_ids = set(eos) if eos is not None else default_eos
    width = vocab_size or len(raw)  # ids at or past a smaller logit dimension can never be sampled
    token_bytes: list[Optional[bytes]] = [None] * width
    for i, b in enumerate(raw[:width]):
        if b and i not in excluded and i not in eos_ids:
            token_bytes[i] = b
    return Vocabulary(token_bytes, eos_ids, tokenizer=tokenizer, kind=kind)


def _tiktoken_bytes(enc: Any) -> tuple[list[Optional[bytes]], set[int], str, set[int]]:
    n = enc.n_vocab
    raw: list[Optional[bytes]] = [None] * n
    special = set(getattr(enc, "_special_tokens", {}).values())
    for i in range(n):
        if i in special:
            continue
        try:
            raw[i] = enc.decode_single_token_bytes(i)
        except KeyError:
            pass
    try:
        default_eos = {int(enc.eot_token)}
    except (AttributeError, KeyError, TypeError):
        default_eos = set()
    return raw, special, "tiktoken", default_eos


def _hf_bytes(tok: Any) -> tuple[list[Optional[bytes]], set[int], str, set[int]]:
    n = len(tok)
    strings = tok.convert_ids_to_tokens(list(range(n)))
    excluded = set(getattr(tok, "added_tokens_decoder", {}) or {}) | set(tok.all_special_ids or [])
    default_eos = {tok.eos_token_id} if getattr(tok, "eos_token_id", None) is not None else set()
    if any(isinstance(s, (bytes, bytearray)) for s in strings[:1000]):
        raw = [bytes(s) if isinstance(s, (bytes, bytearray)) else (s.encode() if s else None) for s in strings]
        return raw, excluded, "tiktoken", default_eos
    kind = _detect_kind(tok, strings)
    raw = _byte_level_bytes(strings) if kind == "byte_level" else _sentencepiece_bytes(strings)
    return raw, excluded, kind, default_eos


def _detect_kind(tok: Any, strings: list[Optional[str]]) -> str:
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and backend.decoder is not None:
        decoder = repr(backend.decoder)
        if "ByteLevel" in decoder:
            return "byte_level"
        if "ByteFallback" in decoder or _SPIECE_SPACE in decoder or "Metaspace" in decoder:
            return "sentencepiece"
    if hasattr(tok, "sp_model"):
        return "sentencepiece"
    sample = [s for s in strings[:5000] if s]
    spiece = sum(_SPIECE_SPACE in s or bool(_BYTE_FALLBACK.match(s)) for s in sample)
    gpt2 = sum("\u0120" in s or "\u010a" in s for s in sample)
    return "sentencepiece" if spiece > gpt2 else "byte_level"


def _byte_level_bytes(strings: list[Optional[str]]) -> list[Optional[bytes]]:
    """GPT-2 alphabet -> bytes, one str.translate over all tokens joined (C speed)."""
    table = {cp: chr(b) for cp, b in gpt2_unicode_to_byte().items()}
    valid = set(table)
    clean = [s if s else "" for s in strings]
    try:
        flat = "".join(clean).translate(table).encode("latin-1")
    except UnicodeEncodeError:  # some token is outside the alphabet: do it per token
        return [_one_byte_level(s, table, valid) for s in clean]
    out: list[Optional[bytes]] = []
    pos = 0
    for s in clean:
        out.append(flat[pos : pos + len(s)] or None)
        pos += len(s)
    return out


def _one_byte_level(s: str, table: dict, valid: set) -> Optional[bytes]:
    if not s:
        return None
    if all(ord(c) in valid for c in s):
        return s.translate(table).encode("latin-1")
    return None  # not a byte-level token (an added token spelled in plain text)


def _sentencepiece_bytes(strings: list[Optional[str]]) -> list[Optional[bytes]]:
    out: list[Optional[bytes]] = []
    for s in strings:
        if not s:
            out.append(None)
            continue
        m = _BYTE_FALLBACK.match(s)
        out.append(bytes([int(m.group(1), 16)]) if m else s.replace(_SPIECE_SPACE, " ").encode("utf-8"))
    return out
