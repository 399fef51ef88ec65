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
    # In decode batches of at least this many requests (0: never), forced text runs inside the
    # decode step itself: one mixed step where the requests holding forced tokens extend by them
    # while the others decode one token, with no step of their own and no overlap delay (it takes
    # precedence over the two policies above). Such a step replays the decode CUDA graphs
    # flattened while its tokens fit twice the largest captured batch, and runs eagerly beyond.
    mix_jump_forward_min_batch: int = 32

    def __post_init__(self) -> None:
        for name in ("overlap_jump_forward_min_batch", "mix_jump_forward_min_batch"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def mixes_jump_forward(self, batch_size: int) -> bool:
        """Whether forced text of a decode batch this large runs inside the decode step."""
        return self.jump_forward and 0 < self.mix_jump_forward_min_batch <= batch_size

    @staticmethod
    def from_server_args(args: ServerArgs) -> "DecodePolicy":
        return DecodePolicy(
            overlap=not args.disable_overlap_schedule,
            jump_forward=not args.disable_jump_forward,
            defer_jump_forward=args.defer_jump_forward,
            overlap_jump_forward_min_batch=args.overlap_jump_forward_min_batch,
            mix_jump_forward_min_batch=args.mix_jump_forward_min_batch,
        )

    def replace(self, **changes) -> "DecodePolicy":
        return dataclasses.replace(self, **changes)
