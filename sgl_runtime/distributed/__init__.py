"""Tensor parallelism on torch.distributed: the process groups of one model's ranks and their collectives."""
