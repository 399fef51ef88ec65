"""The tokenizer manager's end of the pipeline when the scheduler and the detokenizer are child
processes: a zmq PUSH socket to the scheduler and a PULL socket from the detokenizer."""

from __future__ import annotations

import zmq
import zmq.asyncio

from sgl_runtime.process.ipc import IpcAddresses, make_socket

# Most messages taken in one turn of the event loop (each is one step's outputs for many requests).
MAX_MESSAGES_PER_TURN = 64


class ZmqTransport:
    """`send(message)` to the scheduler; `await recv()` the detokenizer's next messages."""

    def __init__(self, addresses: IpcAddresses) -> None:
        self._addresses = addresses

    def start(self) -> None:
        """Open the sockets (inside the event loop that will await `recv`)."""
        context = zmq.asyncio.Context(1)
        self._to_scheduler = make_socket(context, zmq.PUSH, self._addresses.tokenizer_to_scheduler, bind=False)
        self._from_detokenizer = make_socket(context, zmq.PULL, self._addresses.detokenizer_to_tokenizer, bind=True)

    def send(self, message: object) -> None:
        self._to_scheduler.send_pyobj(message)

    async def recv(self) -> list[object]:
        """The next message (waiting for it) and those already queued behind it. Taking them together
        lets a busy event loop apply several steps' outputs at once, so a streaming client gets one
        event for the tokens of all of them instead of falling a step further behind each turn."""
        messages = [await self._from_detokenizer.recv_pyobj()]
        while len(messages) < MAX_MESSAGES_PER_TURN:
            try:
                messages.append(await self._from_detokenizer.recv_pyobj(zmq.NOBLOCK))
            except zmq.Again:
                break
        return messages
