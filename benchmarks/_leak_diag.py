import collections
import gc
import sys

import torch

sys.path.insert(0, "tests")
import pathlib
import tempfile

from model_fixtures import make_tiny_checkpoint

from sgl_runtime.engine import Engine

path = make_tiny_checkpoint("qwen2", pathlib.Path(tempfile.mkdtemp()) / "qwen2")
torch.zeros(1, device="cuda")
base = torch.cuda.memory_allocated()
e = Engine(path, device="cuda", dtype="bfloat16")
e.generate(input_ids=[1, 2, 3, 4], sampling_params={"max_new_tokens": 8, "temperature": 0})
print("after gen allocated MiB", torch.cuda.memory_allocated() >> 20)
e.shutdown()
print("after shutdown allocated MiB", (torch.cuda.memory_allocated() - base) >> 20)
live = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda]
print("live cuda tensors", len(live))
live.sort(key=lambda t: -t.numel() * t.element_size())
seen = 0
for t in live[:6]:
    print("TENSOR", tuple(t.shape), t.dtype, (t.numel() * t.element_size()) >> 20, "MiB")
    for r in gc.get_referrers(t)[:6]:
        if r is live:
            continue
        desc = type(r).__name__
        if isinstance(r, dict):
            owners = [type(o).__name__ for o in gc.get_referrers(r)[:5] if o is not live]
            desc += f" keys={list(r.keys())[:8]} owners={owners}"
        elif isinstance(r, (list, tuple)):
            owners = [type(o).__name__ for o in gc.get_referrers(r)[:5]]
            desc += f" len={len(r)} owners={owners}"
        print("   <-", desc[:300])
# objects of our classes still alive
cnt = collections.Counter(
    type(o).__module__ + "." + type(o).__name__
    for o in gc.get_objects()
    if type(o).__module__.startswith("sgl_runtime")
)
print("sgl objects alive:", cnt.most_common(25))
