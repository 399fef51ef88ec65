"""Many simultaneous streaming clients, and clients that leave mid-request."""

from __future__ import annotations

import asyncio
import json

import httpx
import requests
from server_fixtures import flush_when_idle, wait_idle

NUM_CLIENTS = 64


async def stream_one(client: httpx.AsyncClient, url: str, i: int) -> tuple[int, dict, int]:
    max_new = 4 + i % 13
    body = {
        "text": f"Client number {i} says",
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
    }
    chunks = []
    async with client.stream("POST", f"{url}/generate", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                chunks.append(line[len("data: ") :])
    assert chunks[-1] == "[DONE]"
    return max_new, json.loads(chunks[-2]), len(chunks) - 1


def assert_pool_full_after_flush(server) -> None:
    flush_when_idle(server.url)
    stats = wait_idle(server.url)
    assert stats["kv_pool_free_tokens"] == stats["max_total_num_tokens"], stats


def test_many_concurrent_streams(server):
    async def main():
        limits = httpx.Limits(max_connections=NUM_CLIENTS + 4)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            return await asyncio.gather(*(stream_one(client, server.url, i) for i in range(NUM_CLIENTS)))

    results = asyncio.run(main())
    assert len(results) == NUM_CLIENTS
    for max_new, last, num_chunks in results:
        assert last["meta_info"]["completion_tokens"] == max_new == len(last["output_ids"])
        assert last["meta_info"]["finish_reason"]["type"] == "length"
        assert num_chunks >= 1
    wait_idle(server.url)
    assert_pool_full_after_flush(server)


def test_disconnect_mid_stream_aborts(server):
    wait_idle(server.url)  # the running count below must be this request alone
    body = {"text": "Never ending", "stream": True, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
    with requests.post(f"{server.url}/generate", json=body, stream=True, timeout=60) as r:
        lines = r.iter_lines(decode_unicode=True)
        received = [line for line, _ in zip((x for x in lines if x), range(3))]
        assert len(received) == 3
        busy = server.server_info()["scheduler_stats"]
        assert busy["num_running_reqs"] == 1
    # the response is closed here: the server must abort the request, not decode 3000 tokens
    wait_idle(server.url, timeout=30)
    assert_pool_full_after_flush(server)


def test_disconnect_non_streaming_aborts(server):
    body = {"text": "Never ending either", "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
    try:
        requests.post(f"{server.url}/generate", json=body, timeout=1)
        raise AssertionError("the request should not finish within the client's timeout")
    except requests.Timeout:
        pass
    wait_idle(server.url, timeout=30)
    assert_pool_full_after_flush(server)
