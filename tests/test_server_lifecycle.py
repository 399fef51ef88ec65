"""Process hygiene and access control: API keys, a dying child takes the server down, SIGTERM
stops every process (on a server launched by sgl_lang.Runtime, so that path is covered too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import openai
import pytest
import requests
from server_fixtures import descendant_pids, free_port, pid_alive, start_server

import sgl_lang as sgl

API_KEY = "test-secret"
TEMPLATE = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}\n{% endfor %}<<assistant>>"


@pytest.fixture(scope="module")
def keyed_server():
    server = start_server("--chat-template", TEMPLATE, "--served-model-name", "custom-name", api_key=API_KEY)
    yield server
    server.stop()


def test_api_key_required(keyed_server):
    url = keyed_server.url
    missing = requests.post(f"{url}/generate", json={"text": "x"})
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key" and "API key" in missing.json()["error"]["message"]
    wrong = requests.get(f"{url}/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert requests.get(f"{url}/health").status_code == 200  # liveness stays open
    ok = requests.post(
        f"{url}/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}}, headers=keyed_server.headers
    )
    assert ok.status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    models = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0).models.list()
    assert models.data[0].id == "custom-name"


def test_chat_template_flag(keyed_server):
    from transformers import AutoTokenizer

    info = requests.get(f"{keyed_server.url}/get_model_info", headers=keyed_server.headers).json()
    assert info["chat_template"] == TEMPLATE and info["served_model_name"] == "custom-name"
    client = openai.OpenAI(base_url=f"{keyed_server.url}/v1", api_key=API_KEY, max_retries=0)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "hello there"}]
    r = client.chat.completions.create(model="custom-name", messages=messages, max_tokens=1)
    rendered = "<<system>>S\n<<user>>hello there\n<<assistant>>"
    assert r.usage.prompt_tokens == len(AutoTokenizer.from_pretrained(info["tokenizer_path"]).encode(rendered))


def test_killed_scheduler_takes_server_down(keyed_server):
    pids = keyed_server.server_info()["process_ids"]
    os.kill(pids["scheduler"], signal.SIGKILL)
    code = keyed_server.proc.wait(timeout=60)
    assert code != 0
    assert "scheduler process exited with code -9" in keyed_server.log()
    deadline = time.monotonic() + 15
    while pid_alive(pids["detokenizer"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pid_alive(pids["detokenizer"])


def test_runtime_launches_a_server_that_sigterm_stops_entirely():
    """sgl_lang.Runtime starts the real server; a SIGTERM to the server alone stops its children too."""
    runtime = sgl.Runtime(model_path="random-demo")
    try:
        assert sgl.get_server_info(runtime)["port"] == runtime.port  # a Runtime stands for its endpoint
        state = sgl.function(lambda s: s.__iadd__("Hi" + sgl.gen("x", max_tokens=3))).run(backend=runtime)
        assert 1 <= state.get_meta_info("x")["completion_tokens"] <= 3
        process = runtime.process
        children = descendant_pids(process.pid)
        assert len(children) >= 2, children  # scheduler + detokenizer (+ multiprocessing's resource tracker)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        deadline = time.monotonic() + 15
        while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in children if pid_alive(p)]
    finally:
        runtime.shutdown()
    assert runtime.process is None


def test_bad_model_path_exits_with_error():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sgl_runtime.launch_server",
            "--model-path",
            "/no/such/model",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "/no/such/model" in proc.stderr


def test_help_lists_flags():
    out = subprocess.run(
        [sys.executable, "-m", "sgl_runtime.launch_server", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for flag in (
        "--model-path",
        "--tokenizer-path",
        "--host",
        "--port",
        "--dtype",
        "--device",
        "--context-length",
        "--mem-fraction-static",
        "--max-total-tokens",
        "--max-running-requests",
        "--chunked-prefill-size",
        "--schedule-policy",
        "--disable-radix-cache",
        "--stream-interval",
        "--api-key",
        "--log-level",
        "--served-model-name",
        "--chat-template",
    ):
        assert flag in out, flag
    assert "127.0.0.1" in out
