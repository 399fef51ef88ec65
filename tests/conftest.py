"""Shared pytest configuration: one CPU thread per process, GPU tests skip cleanly without CUDA,
and the session's one shared demo-model server (started lazily by the first test that asks)."""

import os

# Before anything imports torch: the models under test are tiny, so extra intra-op threads only
# fight each other (and the servers the tests start, which inherit this) on a 2-core CI machine.
if not os.environ.get("OMP_NUM_THREADS", "").isdigit():  # unset, empty or malformed
    os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

import pytest  # noqa: E402
from server_fixtures import ServerProcess, shared_server  # noqa: E402


def pytest_configure(config):
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    # SGL_KERNEL_TEST_DEVICE=cpu TRITON_INTERPRET=1 runs the kernel tests on Triton's CPU interpreter (slow; the
    # interpreter computes bfloat16 wrongly, so select the float16 cases: -k "dtype1")
    interpreted = os.environ.get("SGL_KERNEL_TEST_DEVICE") == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    for item in items:
        if "gpu" in item.keywords and not (interpreted and item.module.__name__ == "test_kernels_gpu"):
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def server(request) -> ServerProcess:
    """The session's shared demo-model server (default flags). Tests must not depend on its cache
    contents or on other tests' requests: use unique prompts, and `flush_when_idle` before asserting
    on pool sizes."""
    return shared_server(request.config)


@pytest.fixture(scope="module")
def gguf_cache(tmp_path_factory):
    """GGUF tests: the converted model directories go to a private cache, not ~/.cache."""
    root = tmp_path_factory.mktemp("sgl_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGL_RUNTIME_CACHE", str(root))
        yield root
