"""KV memory pools: request slot x position -> KV slot (ReqToTokenPool), and per-layer K/V storage (TokenToKVPool)."""

from __future__ import annotations

from typing import Optional, Union

import torch


class ReqToTokenPool:
    """Maps (request slot, position) to a KV slot index; one row per running request.

    Writes go through `write` / `write_cells`. With `record_writes` (tensor parallelism) they are also
    kept, in order, until `take_writes` hands them over, so the other ranks can replay them on their
    copies of the table (`apply_writes`)."""

    def __init__(self, size: int, max_context_len: int, device: Union[str, torch.device]):
        if size <= 0 or max_context_len <= 0:
            raise ValueError(f"ReqToTokenPool needs positive size and max_context_len, got {size}, {max_context_len}")
        self.size = size
        self.max_context_len = max_context_len
        self.device = device
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=device)
        self.free_slots: list[int] = list(range(size))
        self.record_writes = False
        self._writes: list[tuple[torch.Tensor, torch.Tensor]] = []  # (flat cell indices, KV slots)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Positions start .. start + len(slots) - 1 of request slot `row` point at `slots`."""
        self.req_to_token[row, start : start + len(slots)] = slots.to(self.req_to_token.device, self.req_to_token.dtype)
        if self.record_writes:
            first = row * self.max_context_len + start
            cells = torch.arange(first, first + len(slots), dtype=torch.int64, device=self.req_to_token.device)
            self._writes.append((cells, slots))

    def write_cells(self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """Cell (rows[i], positions[i]) points at slots[i]."""
        device = self.req_to_token.device
        rows, positions = rows.to(device), positions.to(device)
        self.req_to_token[rows, positions] = slots.to(device, self.req_to_token.dtype)
        if self.record_writes:
            self._writes.append((rows * self.max_context_len + positions, slots))

    def take_writes(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The writes recorded since the last call, oldest first: (flat cell indices, slots) per write."""
        writes, self._writes = self._writes, []
        return writes

    def apply_writes(self, writes: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Replay another table's recorded writes, in order (a later write may overwrite an earlier one)."""
        flat = self.req_to_token.view(-1)
        for cells, slots in writes:
            flat[cells] = slots.to(flat.dtype)

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, n: int = 1) -> Optional[list[int]]:
        """n free request slots, or None when fewer than n are free."""
        if n > len(self.free_slots):
            return None
        slots, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return slots

    def free(self, idx: Union[int, list[int]]) -> None:
        if isinstance(idx, (list, tuple)):
            self.free_slots.extend(int(i) for i in idx)
        else:
            self.free_slots.append(int(idx))

    def clear(self) -> None:
        self.free_slots = list(range(self.size))


class TokenToKVPool:
    """One K and one V tensor per layer, each [size + 1, head_num, head_dim]; slot `size` is a dummy for padding."""

    def __init__(
        self,
        size: int,
        dtype: torch.dtype,
        head_num: int,
        head_dim: int,
        layer_num: int,
        device: Union[str, torch.device],
    ):
        if size <= 0:
            raise ValueError(f"TokenToKVPool size must be positive, got {size}")
        self.size = size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.layer_num = layer_num
        self.device = device
        shape = (size + 1, head_num, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layer_num)]
        self.clear()

    # Allocation
    def available_size(self) -> int:
        return int(self.free_slots.numel())

    def alloc(self, n: int) -> Optional[torch.Tensor]:
        """n free KV slot indices (int64, on the pool's device), or None when fewer than n are free."""
        if n > self.free_slots.numel():
            return None
        selected, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return selected

    def free(self, indices: torch.Tensor) -> None:
        if indices.numel() == 0:
            return
        self.free_slots = torch.cat((self.free_slots, indices.to(self.free_slots.device, torch.int64)))

    def clear(self) -> None:
        self.free_slots = torch.arange(self.size, dtype=torch.int64, device=self.device)

    # K/V storage
    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.k_buffer[layer_id]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.v_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # loc: [T]; k, v: [T, head_num, head_dim]
        self.k_buffer[layer_id][loc] = k.to(self.dtype)
        self.v_buffer[layer_id][loc] = v.to(self.dtype)

    def get_kv_size_bytes(self) -> int:
        per_layer = (self.size + 1) * self.head_num * self.head_dim * self.k_buffer[0].element_size()
        return 2 * per_layer * self.layer_num
