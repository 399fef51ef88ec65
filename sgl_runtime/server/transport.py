"""The tokenizer manager's end of the pipeline when the scheduler and the detokenizer are child
processes: a zmq PUSH socket to the scheduler and a PULL socket from the detokenizer."""

from __future__ import annotations

import zmq
import zmq.asyncio

from sgl_runtime.process.ipc import IpcAddresses, make_socket


class ZmqTransport:
    """`send(message)` to the scheduler; `await recv()` the detokenizer's next message."""

    def __init__(self, addresses: IpcAddresses) -> None:
        self._addresses = addresses

    def start(self) -> None:
        """Open the sockets (inside the event loop that will await `recv`)."""
        context = zmq.asyncio.Context(1)
        self._to_scheduler = make_socket(context, zmq.PUSH, self._addresses.tokenizer_to_scheduler, bind=False)
        self._from_detokenizer = make_socket(context, zmq.PULL, self._addresses.detokenizer_to_tokenizer, bind=True)

    def send(self, message: object) -> None:
        self._to_scheduler.send_pyobj(message)

    async def recv(self) -> object:
        return await self._from_detokenizer.recv_pyobj()
