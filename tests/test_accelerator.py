"""corenn.accelerator, the Tensor.is_<device> flags and the corenn.backends flag modules, against PyTorch."""
from __future__ import annotations

import pytest

import corenn

torch = pytest.importorskip("torch")


def test_no_accelerator_on_a_cpu_only_machine():
    # The test machine has no GPU and no accelerator plugin: every answer says so, as PyTorch's CPU build does.
    assert corenn.accelerator.is_available() is torch.accelerator.is_available() is False
    assert corenn.accelerator.current_accelerator() is None
    assert corenn.accelerator.device_count() == 0
    device = corenn.accelerator.current_accelerator() if corenn.accelerator.is_available() else "cpu"
    assert corenn.zeros(2, device=device).is_cpu


@pytest.mark.parametrize("function", ["current_device_index", "synchronize"])
def test_functions_needing_an_accelerator_raise_runtime_error_naming_themselves(function):
    with pytest.raises(RuntimeError, match=function):
        getattr(corenn.accelerator, function)()
    with pytest.raises(RuntimeError, match="set_device_index"):
        corenn.accelerator.set_device_index(0)


def test_accelerator_reports_a_registered_device_backend(corenn_plugin):
    import numpy as np
    from corenn.dispatch import Backend
    from corenn.hookspecs import hookimpl

    synced = []

    class FakeAccelerator:
        @hookimpl
        def corenn_register_backends(self):
            return [Backend(type="cuda", xp=np, to_device=lambda a, i=None: np.asarray(a),
                            to_host=lambda a: np.asarray(a), device_count=lambda: 2, default_index=0,
                            synchronize=lambda index=None: synced.append(index))]

    corenn_plugin(FakeAccelerator(), name="fake-accelerator")
    assert corenn.accelerator.is_available()
    assert corenn.accelerator.current_accelerator() == corenn.device("cuda")
    assert corenn.accelerator.device_count() == 2
    corenn.accelerator.set_device_index(1)
    assert corenn.accelerator.current_device_index() == 1
    corenn.accelerator.synchronize()
    assert synced == [1]
    with corenn.accelerator.device_index(0):
        assert corenn.accelerator.current_device_index() == 0
    assert corenn.accelerator.current_device_index() == 1
    with pytest.raises(RuntimeError, match="out of range"):
        corenn.accelerator.set_device_index(5)
    corenn.accelerator.set_device_index(0)


def test_tensor_device_flags_match_torch():
    ours, theirs = corenn.zeros(2), torch.zeros(2)
    for flag in ("is_cuda", "is_xpu", "is_mps", "is_meta", "is_cpu"):
        assert getattr(ours, flag) is getattr(theirs, flag), flag


def test_cudnn_flags_are_checked_attributes_with_torch_defaults():
    cudnn = corenn.backends.cudnn
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(cudnn, flag) == getattr(torch.backends.cudnn, flag), flag
    cudnn.benchmark = True
    try:
        assert cudnn.benchmark is True
        with cudnn.flags(benchmark=False, deterministic=True):
            assert cudnn.benchmark is False and cudnn.deterministic is True
        assert cudnn.benchmark is True and cudnn.deterministic is False
        with pytest.raises(TypeError, match="benchmark"):
            cudnn.benchmark = 1
    finally:
        cudnn.benchmark = False
    assert cudnn.is_available() is False and cudnn.version() is None


def test_cuda_matmul_flags_and_float32_matmul_precision():
    matmul = corenn.backends.cuda.matmul
    assert matmul.allow_tf32 is torch.backends.cuda.matmul.allow_tf32 is False
    assert matmul.allow_fp16_reduced_precision_reduction is True
    assert corenn.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    matmul.allow_tf32 = True
    try:
        assert corenn.get_float32_matmul_precision() == "high"
    finally:
        corenn.set_float32_matmul_precision("highest")
    assert matmul.allow_tf32 is False
    with pytest.raises(AttributeError, match="Unknown attribute"):
        matmul.allow_tf33 = True
    with pytest.raises(TypeError, match="allow_tf32"):
        matmul.allow_tf32 = "yes"
    assert corenn.backends.cuda.is_built() is False
    assert corenn.backends.cuda.flash_sdp_enabled() is True
    with corenn.backends.cuda.sdp_kernel(enable_flash=False):
        assert corenn.backends.cuda.flash_sdp_enabled() is False
    assert corenn.backends.cuda.flash_sdp_enabled() is True


def test_other_backends_answer_truthfully():
    assert corenn.backends.mps.is_available() is torch.backends.mps.is_available() is False
    assert corenn.backends.mps.is_built() is False
    assert corenn.backends.mkldnn.is_available() is False  # corenn runs on numpy, not oneDNN
    assert corenn.backends.openmp.is_available() is False
    corenn.backends.mkldnn.enabled = False
    corenn.backends.mkldnn.enabled = True


def test_cpu_capability_matches_torch():
    ours = corenn.backends.cpu.get_cpu_capability()
    assert ours in ("AVX512", "AVX2", "DEFAULT", "SVE256")
    # PyTorch reports the kernels it was built with; on x86 both read the same CPU flags.
    assert ours == torch.backends.cpu.get_cpu_capability() or ours == "DEFAULT"
