"""The server's child processes collect young cycles every GC_THRESHOLDS[0] allocations, not
Python's 700 (process/ipc.tune_gc): a process holding compiled constraints otherwise spends a
large share of its time in full collections."""

from __future__ import annotations

import gc
import multiprocessing

from sgl_runtime.process.ipc import GC_THRESHOLDS, setup_child_process


def _child(conn) -> None:
    setup_child_process("gc-probe", "warning")
    conn.send(gc.get_threshold())


def test_child_processes_use_the_tuned_collector():
    before = gc.get_threshold()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_child, args=(child,))
    process.start()
    assert parent.poll(60)
    assert parent.recv() == GC_THRESHOLDS
    process.join(10)
    assert gc.get_threshold() == before  # the caller's process is left alone
