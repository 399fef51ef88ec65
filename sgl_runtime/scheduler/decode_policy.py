"""How the scheduler runs decode steps: a small frozen policy it is given at start-up (from
ServerArgs), not switches patched onto a running scheduler."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sgl_runtime.server_args import ServerArgs


@dataclass(frozen=True)
class DecodePolicy:
    # Launch step N+1's forward before reading step N's tokens back (scheduler/overlap.py).
    overlap: bool = True
    # Append text a constraint forces and run it as one extend (constrained/jump_forward.py).
    jump_forward: bool = True
    # Run forced-text extends in batches of their own, apart from the (graph-replayed) decode
    # steps; measured no slower on the CPU.
    defer_jump_forward: bool = True
    # Overlap constrained requests with jump-forward too in batches of at least this many
    # requests (0: never). On the H200 (benchmarks/jump_forward_overlap.py) overlapping gained
    # 5-13% chars/s at every batch of 16 to 128, lost 20% at batch 1, mixed in between.
    overlap_jump_forward_min_batch: int = 16

    def __post_init__(self) -> None:
        if self.overlap_jump_forward_min_batch < 0:
            raise ValueError(f"overlap_jump_forward_min_batch must be >= 0, got {self.overlap_jump_forward_min_batch}")

    @staticmethod
    def from_server_args(args: ServerArgs) -> "DecodePolicy":
        return DecodePolicy(
            overlap=not args.disable_overlap_schedule,
            jump_forward=not args.disable_jump_forward,
            defer_jump_forward=args.defer_jump_forward,
            overlap_jump_forward_min_batch=args.overlap_jump_forward_min_batch,
        )

    def replace(self, **changes) -> "DecodePolicy":
        return dataclasses.replace(self, **changes)
