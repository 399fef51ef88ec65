"""The offline API: `Engine(...).generate(...)`, the server's own front half without HTTP.

Requests go through the same TokenizerManager as `/generate` (parsing, validation, `n > 1`
fan-out, stop strings, detokenization), over an in-process transport to a Scheduler that
lives in this process (`in_process.py`): the same input gives the same output or the same
error as the server.
"""

from __future__ import annotations

import asyncio
import atexit
from typing import Any, AsyncIterator, Optional, Union

from sgl_runtime.io_struct import GenerateReqInput
from sgl_runtime.process.child_processes import ChildProcesses
from sgl_runtime.server_args import ServerArgs

ENGINE_MAX_SEQUENCES = 1 << 24  # sequences (prompts x n) one Engine.generate call may ask for


class Engine:
    """Loads the model (the built-in demo model when `model_path` is None) and generates synchronously.

    `server_args` are ServerArgs fields (device="cpu", max_total_tokens=..., ...). Constraints
    are compiled by the scheduler's compile workers, killable processes bounded by
    `constraint_compile_timeout`, exactly as in the server. With tp_size=N > 1 this process is
    tensor-parallel rank 0 and the engine starts ranks 1..N-1 as child processes (one tensor-parallel
    engine per process at a time); a rank that dies makes every later call raise TensorParallelError.
    """

    def __init__(self, model_path: Optional[str] = None, **server_args: Any) -> None:
        from sgl_runtime.detokenizer.detokenizer_manager import DetokenizerManager
        from sgl_runtime.in_process import InProcessTransport
        from sgl_runtime.scheduler.scheduler import Scheduler
        from sgl_runtime.scheduler.scheduler_endpoint import SchedulerEndpoint
        from sgl_runtime.server.request_tokenizer import ModelInfo
        from sgl_runtime.server.tokenizer_manager import TokenizerManager

        self.scheduler = None
        self.workers: Optional[ChildProcesses] = None  # tensor-parallel ranks 1..N-1 (this process is rank 0)
        self.worker_failure: Optional[str] = None
        # An offline batch may be as large as the caller likes; the server's per-request cap guards HTTP clients.
        server_args.setdefault("max_sequences_per_request", ENGINE_MAX_SEQUENCES)
        self.server_args = ServerArgs.from_kwargs(model_path=model_path, **server_args)
        if self.server_args.tp_size > 1:
            self.server_args = self._start_workers(self.server_args)
        try:
            self.scheduler = Scheduler(self.server_args)
            if self.workers is not None:
                self.workers.wait_ready()
                self.workers.watch(self._on_worker_failure)
        except BaseException:
            self._stop_workers()
            raise
        self.server_args = self.scheduler.server_args  # the model path resolved
        endpoint = SchedulerEndpoint(self.scheduler)
        endpoint.warm_up()
        self.tokenizer = self.scheduler.tokenizer
        config = self.scheduler.model_config
        self.context_length = config.context_length
        model_info = ModelInfo(
            context_length=config.context_length,
            vocab_size=config.vocab_size,
            eos_token_ids=frozenset(config.eos_token_ids),
        )
        transport = InProcessTransport(endpoint, DetokenizerManager(self.tokenizer))
        self._loop = asyncio.new_event_loop()
        self.tokenizer_manager = TokenizerManager(self.server_args, model_info, transport, tokenizer=self.tokenizer)
        self._loop.run_until_complete(self.tokenizer_manager.start())

    # ------------------------------------------------------------------ public API
    def generate(
        self,
        prompt: Optional[Union[str, list[str]]] = None,
        sampling_params: Optional[Union[dict, list[dict]]] = None,
        input_ids: Optional[Union[list[int], list[list[int]]]] = None,
        return_logprob: Union[bool, list[bool]] = False,
        logprob_start_len: Union[int, list[int]] = -1,
        top_logprobs_num: Union[int, list[int]] = 0,
        token_ids_logprob: Optional[Union[list[int], list[list[int]]]] = None,
        return_text_in_logprobs: bool = False,
        rid: Optional[Union[str, list[str]]] = None,
    ) -> Union[dict, list[dict]]:
        """The `/generate` answer: one dict ({text, output_ids, meta_info}) for one prompt with
        n = 1, else a list (prompt-major, then sample index). InvalidRequestError names a bad field."""
        obj = GenerateReqInput(
            text=prompt,
            input_ids=input_ids,
            sampling_params=sampling_params,
            rid=rid,
            return_logprob=return_logprob,
            logprob_start_len=logprob_start_len,
            top_logprobs_num=top_logprobs_num,
            token_ids_logprob=token_ids_logprob,
            return_text_in_logprobs=return_text_in_logprobs,
        )
        return self._loop.run_until_complete(_first(self.tokenizer_manager.generate(obj)))

    def flush_cache(self) -> bool:
        return self.scheduler.flush_cache().success

    def get_stats(self) -> dict:
        return self.scheduler.get_stats()

    def shutdown(self) -> None:
        """Stop the front half, the scheduler and any TP workers, and return the device memory they took
        (model, KV pools, CUDA graphs), so another Engine or a server in this process can size its KV pool."""
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:
            self._loop.run_until_complete(self.tokenizer_manager.stop())
            self._loop.close()
            self.tokenizer_manager = None  # it reaches the scheduler through its transport
            scheduler.shutdown()
            device = scheduler.model_runner.device
            scheduler.model_runner.release()
            del scheduler
            _return_device_memory(device)
        self._stop_workers()

    def _start_workers(self, args: ServerArgs) -> ServerArgs:
        """Check that the model splits over tp_size ranks, then start ranks 1..N-1 of this node."""
        from sgl_runtime.model_executor.model_runner import resolve_model_path
        from sgl_runtime.scheduler.tp_worker_process import check_tp_config, start_tp_workers, with_rendezvous

        if args.node_rank != 0:
            raise ValueError(
                "an Engine runs rank 0 (node 0); start the other nodes with "
                "`python -m sgl_runtime.launch_server --node-rank N`"
            )
        args = with_rendezvous(args.replace(model_path=resolve_model_path(args)))
        check_tp_config(args)
        self.workers = ChildProcesses()
        # A script that ends without shutdown() would hang at exit: multiprocessing joins the workers,
        # which wait on rank 0 forever. atexit runs this first (it is registered after multiprocessing's).
        atexit.register(self.workers.stop)
        start_tp_workers(self.workers, args)
        return args

    def _on_worker_failure(self, message: str) -> None:
        self.worker_failure = message

    def _stop_workers(self) -> None:
        if self.workers is not None:
            atexit.unregister(self.workers.stop)
            self.workers.stop()
        self.workers = None

    def __del__(self) -> None:
        # An Engine dropped without shutdown(): stop its front half's receive task, so asyncio does not
        # report a pending task destroyed (the model's memory goes with the objects).
        loop, manager = getattr(self, "_loop", None), getattr(self, "tokenizer_manager", None)
        if loop is not None and manager is not None and not loop.is_closed() and not loop.is_running():
            try:
                loop.run_until_complete(manager.stop())
                loop.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down what stop() needs
                pass

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _return_device_memory(device: str) -> None:
    import gc

    import torch

    gc.collect()  # the scheduler's objects reference each other; free the cycles now, not at some later GC
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # hand the cached blocks back to the driver


async def _first(results: AsyncIterator) -> Any:
    try:
        return await results.__anext__()
    finally:
        await results.aclose()
