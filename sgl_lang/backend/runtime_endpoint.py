"""Backend for a running sgl_runtime (or SGLang) server over its native HTTP API, with `requests`."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Union

import requests

from sgl_lang.backend.base import BackendError, BaseBackend
from sgl_lang.chat_template import ChatTemplate, chat_template_from_jinja
from sgl_lang.choices import ChoicesDecision, ChoicesSamplingMethod, normalized_prompt_logprob
from sgl_lang.sampling_params import SglSamplingParams


class RuntimeEndpoint(BaseBackend):
    """A server at `base_url` speaking POST /generate, GET /get_model_info, /get_server_info, ..."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        verify: Optional[str] = None,
        chat_template_name: Optional[str] = None,
        *,
        timeout: float = 600.0,
        chat_template: Optional[ChatTemplate] = None,
    ):
        """`verify`: requests' TLS verification (a CA bundle path, or False). The chat template is
        the server's own (from /get_model_info); SGLang's named templates (`chat_template_name`)
        are not shipped, so naming one raises ValueError."""
        if chat_template_name is not None:
            raise ValueError(
                f"chat_template_name={chat_template_name!r} is not supported by sgl_lang: the chat "
                "template comes from the server (start it with --chat-template to change it)"
            )
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.verify = True if verify is None else verify
        self.timeout = timeout
        self.model_info = self._request("GET", "/get_model_info")
        self.chat_template = chat_template or chat_template_from_jinja(
            self.model_info.get("chat_template"), _template_tokens(self.model_info)
        )

    # Server information and cache control
    def get_model_name(self) -> str:
        return self.model_info.get("model_path") or "unknown"

    def get_chat_template(self) -> ChatTemplate:
        return self.chat_template

    def get_server_info(self) -> dict:
        return self._request("GET", "/get_server_info")

    def flush_cache(self) -> None:
        self._request("POST", "/flush_cache")

    def cache_prefix(self, prefix: str) -> None:
        if prefix:
            self._generate({"text": prefix, "sampling_params": {"max_new_tokens": 0}})

    def commit_lazy_operations(self, s) -> None:
        self.cache_prefix(s.text_)

    # Generation
    def generate(self, s, sampling_params: SglSamplingParams) -> tuple[Union[str, list[str]], Union[dict, list[dict]]]:
        """The completion and its meta_info; with n > 1 (the server answers a list) the n completions
        and their n meta_infos."""
        obj = self._generate(self._generate_body(s.text_, sampling_params))
        if isinstance(obj, list):
            return [o["text"] for o in obj], [o["meta_info"] for o in obj]
        return obj["text"], obj["meta_info"]

    def generate_stream(self, s, sampling_params: SglSamplingParams) -> Iterator[tuple[str, dict]]:
        body = {**self._generate_body(s.text_, sampling_params), "stream": True}
        sent = 0
        for event in self._stream("/generate", body):
            new_text = event["text"][sent:]
            sent = len(event["text"])
            yield new_text, event.get("meta_info", {})

    def select(self, s, choices: list, temperature: float, choices_method: ChoicesSamplingMethod) -> ChoicesDecision:
        """Score every choice exactly with prompt logprobs: commit the prefix, then one batched request."""
        if temperature > 1e-5:
            raise ValueError("select scores choices by their logprobs; temperature must be 0")
        prefix = s.text_
        prompt_len = 0
        if prefix:  # commit the prefix once; its token count places the logprob window
            committed = self._generate({"text": prefix, "sampling_params": {"max_new_tokens": 0}})
            prompt_len = committed["meta_info"]["prompt_tokens"]
        results = self._generate(
            {
                "text": [prefix + choice for choice in choices],
                "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                "return_logprob": True,
                "return_text_in_logprobs": True,
                "logprob_start_len": max(prompt_len - 1, 0),
            }
        )
        inputs = [choice_token_logprobs(prefix, r["meta_info"]["input_token_logprobs"], prompt_len) for r in results]
        unconditional = self._unconditional(inputs) if choices_method.requires_unconditional_logprobs else None
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=[normalized_prompt_logprob(entries) for entries in inputs],
            input_token_logprobs=inputs,
            output_token_logprobs=[r["meta_info"].get("output_token_logprobs", []) for r in results],
            unconditional_token_logprobs=unconditional,
        )

    def _unconditional(self, inputs: list) -> list:
        results = self._generate(
            {
                "input_ids": [[entry[1] for entry in entries] for entries in inputs],
                "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            }
        )
        return [r["meta_info"]["input_token_logprobs"] for r in results]

    @staticmethod
    def _generate_body(text: str, sampling_params: SglSamplingParams) -> dict:
        sampling, request = sampling_params.to_request()
        return {"text": text, "sampling_params": sampling, **request}

    # HTTP
    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _generate(self, body: dict) -> Any:
        return self._request("POST", "/generate", body)

    def _request(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        try:
            res = requests.request(
                method,
                self.base_url + path,
                json=body,
                headers=self._headers(),
                timeout=self.timeout,
                verify=self.verify,
            )
        except requests.RequestException as e:
            raise BackendError(f"cannot reach {self.base_url}{path}: {e}") from e
        _raise_for_status(res)
        try:
            return res.json() if res.content else None
        except ValueError:  # plain-text answers (e.g. /flush_cache)
            return res.text

    def _stream(self, path: str, body: dict) -> Iterator[dict]:
        try:
            res = requests.post(
                self.base_url + path,
                json=body,
                headers=self._headers(),
                stream=True,
                timeout=self.timeout,
                verify=self.verify,
            )
        except requests.RequestException as e:
            raise BackendError(f"cannot reach {self.base_url}{path}: {e}") from e
        with res:
            _raise_for_status(res)
            for line in res.iter_lines(decode_unicode=False):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                event = json.loads(payload)
                if "error" in event:
                    raise BackendError(_error_message(event))
                yield event


def choice_token_logprobs(prefix: str, entries: list, prompt_len: int) -> list:
    """The logprob entries of a choice's own tokens.

    The request asks for logprobs from position prompt_len - 1 (entry i scores the token at
    logprob_start_len + i given the tokens before it; token 0 comes as None), so the first entry
    is the prefix's last token.
    A token spanning the prefix/choice boundary is scored with the choice ("token healing");
    when the first token still belongs to the prefix alone (its text ends the prefix), it is
    dropped.
    """
    if prompt_len == 0 or not entries:
        return list(entries)
    first_text = entries[0][2] if len(entries[0]) > 2 else None
    if first_text is not None and prefix.endswith(first_text):
        return list(entries[1:])
    return list(entries)


def _template_tokens(model_info: dict) -> dict:
    """Special-token strings a chat template may reference. bos_token stays empty: the server's
    tokenizer adds BOS itself when it encodes the program text."""
    names = ("eos_token", "pad_token", "unk_token")
    return {name: model_info[name] for name in names if isinstance(model_info.get(name), str)}


def _error_message(obj: Any) -> str:
    if isinstance(obj, dict):
        for key in ("error", "message", "detail"):
            if key in obj:
                return _error_message(obj[key])
        return json.dumps(obj)
    return str(obj)


def _raise_for_status(res: requests.Response) -> None:
    if res.status_code < 400:
        return
    try:
        message = _error_message(res.json())
    except ValueError:
        message = res.text
    raise BackendError(f"HTTP {res.status_code} from {res.url}: {message}", res.status_code)
