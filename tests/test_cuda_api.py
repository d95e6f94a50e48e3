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


def test_the_cuda_api_follows_the_device_protocol_of_a_cuda_backend(corenn_plugin):
    # A stand-in ``cuda`` backend built from the strict test device: two indices, a current one.
    import attrs
    import strict_device
    synced = []
    backend = attrs.evolve(strict_device.BACKEND, type="cuda", synchronize=synced.append,
                           memory_stats=lambda index=None: {"allocated_bytes.all.current": 10 * (index + 1)})

    class FakeCuda:
        @corenn.hookimpl
        def corenn_register_backends(self):
            return [backend]
    corenn_plugin(FakeCuda())
    assert corenn.cuda.is_available() and corenn.cuda.device_count() == 2
    assert corenn.cuda.current_device() == 0
    with strict_device.device_guard(1):
        assert corenn.cuda.current_device() == 1
        assert corenn.cuda.memory_allocated() == 20
        corenn.cuda.synchronize()
    corenn.cuda.synchronize("cuda:1")
    assert synced == [1, 1] and corenn.cuda.memory_allocated(0) == 10
    with pytest.raises(RuntimeError, match="device index 2 out of range: cuda has 2 devices"):
        corenn.cuda.memory_stats(2)
    t = corenn.ones(2).cuda(1)
    assert t.device == corenn.device("cuda:1") and t.is_cuda
