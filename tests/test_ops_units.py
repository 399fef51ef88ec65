"""Unit tests (no server) of the operational pieces: body limits, API-key check, start-up checks,
stale IPC folders, SGLang flag parity, sampling defaults, per-request failure in the detokenizer,
and the scheduler watchdog."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from sgl_runtime.io_struct import ReqTokenOutput
from sgl_runtime.preflight import StartupError, check_server_args
from sgl_runtime.process.ipc import IPC_DIR_PREFIX, OWNER_FILE, remove_stale_ipc_dirs
from sgl_runtime.sampling_params import InvalidRequestError, SamplingParams
from sgl_runtime.server.auth import key_matches
from sgl_runtime.server.errors import openai_message
from sgl_runtime.server.json_body import BodyTooLargeError, parse_json, read_body
from sgl_runtime.server.overload import AdmissionGate, ServerBusyError, request_deadline
from sgl_runtime.server_args import ServerArgs, parse_args
from sgl_runtime.tokenizer_utils import load_tokenizer, read_generation_defaults


@pytest.mark.parametrize(
    "raw,words",
    [
        (b"[" * 100_000, "nested too deeply"),
        (b"[" * 70 + b"]" * 70, "nested too deeply"),
        (b'{"a": ' + b"1" * 5000 + b"}", "integer of 5000 digits"),
        (b'{"t": "\\ud800"}', "t: contains a lone surrogate"),
        (b'{"\\udc00": 1}', "<key>: contains a lone surrogate"),
        (b'{"s": {"temperature": NaN}}', "s.temperature"),
        (b'{"x": [1, -Infinity]}', "x[1]: must be a finite"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a":', "not valid JSON"),
    ],
)
def test_parse_json_limits(raw, words):
    with pytest.raises(InvalidRequestError, match=None) as info:
        parse_json(raw)
    assert words in str(info.value)


def test_parse_json_accepts_ordinary_bodies():
    body = {"text": "héllo \U0001f600", "sampling_params": {"seed": 2**63 - 1, "temperature": 0.5}, "n": [[1]] * 3}
    assert parse_json(json.dumps(body).encode()) == body


class _FakeRequest:
    def __init__(self, chunks, content_length=None):
        self.headers = {} if content_length is None else {"content-length": str(content_length)}
        self._chunks = chunks

    async def stream(self):
        for chunk in self._chunks:
            yield chunk


def test_read_body_size_limit():
    assert asyncio.run(read_body(_FakeRequest([b"ab", b"cd"]), max_bytes=4)) == b"abcd"
    with pytest.raises(BodyTooLargeError):
        asyncio.run(read_body(_FakeRequest([b"ab", b"cde"]), max_bytes=4))
    with pytest.raises(BodyTooLargeError, match="100 bytes"):
        asyncio.run(read_body(_FakeRequest([], content_length=100), max_bytes=4))


@pytest.mark.parametrize(
    "header,ok",
    [
        ("Bearer k3y", True),
        ("bearer k3y", True),
        ("BEARER  k3y", True),
        ("Bearer k3", False),
        ("Basic k3y", False),
        ("k3y", False),
        (None, False),
        ("Bearer \udcff", False),
    ],
)
def test_api_key_scheme_case_insensitive(header, ok):
    assert key_matches(header, "k3y") is ok


def test_api_key_uses_constant_time_compare():
    import inspect

    import sgl_runtime.server.auth as auth

    assert "hmac.compare_digest" in inspect.getsource(auth.key_matches)


def test_api_key_from_environment(monkeypatch):
    monkeypatch.setenv("SGLANG_API_KEY", "from-env")
    assert parse_args([]).api_key == "from-env"
    assert parse_args(["--api-key", "flag"]).api_key == "flag"


def test_sglang_flags_accepted():
    args = parse_args(
        [
            "--enable-metrics",
            "--trust-remote-code",
            "--skip-server-warmup",
            "--log-requests",
            "--watchdog-timeout",
            "20",
            "--decode-log-interval",
            "7",
            "--sampling-defaults",
            "openai",
            "--max-queued-requests",
            "3",
            "--graceful-shutdown-timeout",
            "4",
            "--request-timeout",
            "9",
        ]
    )
    assert (args.enable_metrics, args.trust_remote_code, args.skip_server_warmup, args.log_requests) == (True,) * 4
    assert (args.watchdog_timeout, args.log_interval, args.sampling_defaults) == (20.0, 7, "openai")
    assert (args.max_queued_requests, args.graceful_shutdown_timeout, args.request_timeout) == (3, 4.0, 9.0)
    assert parse_args(["--log-interval", "5"]).log_interval == 5
    assert parse_args([]).sampling_defaults == "model"  # SGLang's default: the checkpoint's generation_config


@pytest.mark.parametrize(
    "kwargs",
    [
        {"watchdog_timeout": 0},
        {"max_queued_requests": -1},
        {"request_timeout": -1},
        {"max_sequences_per_request": 0},
        {"graceful_shutdown_timeout": -1},
    ],
)
def test_bad_operational_flags(kwargs):
    with pytest.raises(ValueError):
        ServerArgs(**kwargs)


def test_preflight_paths(tmp_path):
    with pytest.raises(StartupError, match="--model-path .*no such directory"):
        check_server_args(ServerArgs(model_path=str(tmp_path / "nope")))
    with pytest.raises(StartupError, match="config.json not found"):
        check_server_args(ServerArgs(model_path=str(tmp_path)))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(StartupError, match="--model-path .*tokenizer.json"):
        check_server_args(ServerArgs(model_path=str(tmp_path)))
    with pytest.raises(StartupError, match="--tokenizer-path '/tmp'"):
        check_server_args(ServerArgs(tokenizer_path="/tmp"))
    with pytest.raises(StartupError, match="--chat-template '/no/such.jinja': no such file"):
        check_server_args(ServerArgs(chat_template="/no/such.jinja"))
    check_server_args(ServerArgs(chat_template="{{ messages[0]['content'] }}"))  # template text is fine


def test_missing_chat_template_file_is_an_error_not_template_text():
    from sgl_runtime.tokenizer_utils import _read_chat_template

    with pytest.raises(FileNotFoundError, match="/no/such.jinja"):
        _read_chat_template("/no/such.jinja")
    assert _read_chat_template("{{ x }}") == "{{ x }}"


def test_preflight_cuda_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    start = time.monotonic()
    with pytest.raises(StartupError, match="--device cuda"):
        check_server_args(ServerArgs(device="cuda"))
    assert time.monotonic() - start < 10


def test_stale_ipc_folders_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale, live, unowned = (tmp_path / f"{IPC_DIR_PREFIX}{n}" for n in ("a", "b", "c"))
    for folder in (stale, live, unowned):
        folder.mkdir()
    (stale / OWNER_FILE).write_text(str(dead.pid))
    (live / OWNER_FILE).write_text(str(os.getpid()))
    assert remove_stale_ipc_dirs(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and unowned.exists()


def test_sampling_params_reject_what_used_to_kill_children():
    for bad in (
        {"seed": 2**64},
        {"seed": -(2**63) - 1},
        {"skip_special_tokens": 0},
        {"spaces_between_special_tokens": "no"},
        {"ignore_eos": 1},
        {"temperature": float("nan")},
        {"top_p": float("inf")},
    ):
        with pytest.raises(InvalidRequestError, match=next(iter(bad))):
            SamplingParams.from_dict(bad)
    assert SamplingParams.from_dict({"seed": 2**63 - 1, "n": 4}).seed == 2**63 - 1


def test_openai_message_uses_openai_names():
    assert openai_message("sampling_params.max_new_tokens: too many") == "max_tokens: too many"
    assert (
        openai_message("sampling_params.max_new_tokens: x", {"max_new_tokens": "max_completion_tokens"})
        == "max_completion_tokens: x"
    )
    assert (
        openai_message("input_ids: token id 9 is outside", {"input_ids": "prompt"}) == "prompt: token id 9 is outside"
    )
    assert openai_message("sampling_params.seed: bad") == "seed: bad"


def test_admission_gate():
    gate = AdmissionGate(max_queued=2, max_per_request=4, capacity=1)
    gate.admit(3)
    with pytest.raises(ServerBusyError):
        gate.admit(1)
    gate.release(3)
    gate.admit(1)
    with pytest.raises(InvalidRequestError, match="sequences"):
        gate.check_size(5, 1)
    gate.draining = True
    with pytest.raises(ServerBusyError, match="shutting down"):
        gate.admit(1)
    assert AdmissionGate(None, 4).limit is None


def test_request_deadline():
    assert request_deadline(None, None, 10.0) is None
    assert request_deadline(None, 5, 10.0) == 15.0
    assert request_deadline(2, 5, 10.0) == 12.0
    for bad in (0, -1, float("nan"), "3", True):
        with pytest.raises(InvalidRequestError, match="timeout"):
            request_deadline(bad, None, 0.0)


def test_generation_defaults(tmp_path):
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "do_sample": True, "eos_token_id": 2})
    )
    assert read_generation_defaults(str(tmp_path)) == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}


def test_detokenizer_fails_one_request_and_serves_the_others():
    from sgl_runtime.detokenizer.detokenizer_manager import DetokenizerManager
    from sgl_runtime.io_struct import BatchTokenIDOut
    from sgl_runtime.model_loader.demo_model import get_demo_model_path

    manager = DetokenizerManager(load_tokenizer(get_demo_model_path()))
    counts = {"prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 0}
    good = ReqTokenOutput(rid="good", new_output_ids=[9707], finished_reason={"type": "length"}, **counts)
    bad = ReqTokenOutput(rid="bad", new_output_ids=[10**12], finished_reason=None, **counts)
    out = manager.process(BatchTokenIDOut(outputs=[bad, good]))
    assert out.outputs[0].finished_reason["type"] == "abort" and "internal error" in out.outputs[0].meta_info["error"]
    assert out.outputs[1].text_delta and out.outputs[1].finished_reason == {"type": "length"}
    assert "bad" not in manager.states


def test_watchdog_ends_a_hung_process():
    code = textwrap.dedent("""
        import time
        from sgl_runtime.scheduler.watchdog import Watchdog
        told = []
        Watchdog(0.3, told.append).start()
        time.sleep(30)
    """)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3 and time.monotonic() - start < 20
    assert "no progress" in proc.stderr


def test_latency_histograms_and_counters():
    from sgl_runtime.io_struct import ReqStrOutput, TokenizedGenerateReqInput
    from sgl_runtime.server.metrics import ServerMetrics
    from sgl_runtime.server.request_state import ReqState

    metrics = ServerMetrics()
    request = TokenizedGenerateReqInput(
        rid="r", input_text=None, input_ids=[1, 2], sampling_params=SamplingParams(regex="a+")
    )
    state = ReqState(request=request, updates=asyncio.Queue(), created=time.perf_counter() - 1.0)
    meta = {"prompt_tokens": 2, "completion_tokens": 1, "cached_tokens": 0, "forward_passes": 1, "queue_time": 0.25}
    state.apply(ReqStrOutput(rid="r", text_delta="a", new_output_ids=[5], finished_reason=None, meta_info=meta))
    metrics.observe(state, first_output=True)
    time.sleep(0.01)
    meta = {**meta, "completion_tokens": 4, "forward_passes": 2}
    state.apply(ReqStrOutput(rid="r", text_delta="aaa", new_output_ids=[5, 5, 5], finished_reason=None, meta_info=meta))
    metrics.observe(state, first_output=False)
    state.apply(
        ReqStrOutput(rid="r", text_delta="", new_output_ids=[], finished_reason={"type": "abort"}, meta_info=meta)
    )
    metrics.observe(state, first_output=False)
    text = metrics.exposition({"num_retractions": 2}, {"constraint_compile_hits": 3}).decode()

    def value(name: str) -> float:
        return float(next(line for line in text.splitlines() if line.startswith(name + " ")).split()[-1])

    assert value("sgl_runtime_time_to_first_token_seconds_sum") >= 1.0  # counted from arrival
    assert value("sgl_runtime_inter_token_latency_seconds_count") == 1
    assert value("sgl_runtime_time_per_output_token_seconds_count") == 1
    assert value("sgl_runtime_queue_time_seconds_sum") == 0.25
    assert value("sgl_runtime_aborted_requests_total") == 1
    assert value("sgl_runtime_jump_forward_tokens_total") == 2  # 4 tokens in 2 forward passes
    assert value("sgl_runtime_constraint_compile_hits_total") == 3 and value("sgl_runtime_num_retractions") == 2
