"""``corenn.cuda`` without the corenn-cuda plugin: PyTorch's idioms keep working on a CPU-only machine."""
import pytest

import corenn


def test_without_a_cuda_backend_nothing_is_available():
    if "cuda" in corenn.dispatch.backends:
        pytest.skip("a cuda backend is registered on this machine")
    assert corenn.cuda.is_available() is False
    assert corenn.cuda.device_count() == 0
    corenn.cuda.manual_seed(0)  # a no-op, as in PyTorch
    device = "cuda" if corenn.cuda.is_available() else "cpu"
    assert corenn.ones(2, device=device).device == corenn.device("cpu")


def test_asking_for_a_cuda_device_names_the_plugin():
    if "cuda" in corenn.dispatch.backends:
        pytest.skip("a cuda backend is registered on this machine")
    with pytest.raises(RuntimeError, match="corenn-cuda"):
        corenn.cuda.synchronize()
    with pytest.raises(RuntimeError, match="available devices: cpu"):
        corenn.zeros(2, device="cuda")
