"""Seed note "Modules", section "Module Initialization": device/dtype arguments, skip_init, float buffers."""
import numpy as np
import pytest

import corenn as torch
from corenn import nn


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs the corenn-cuda plugin and a GPU")
def test_initialize_module_directly_onto_gpu():
    m = nn.Linear(5, 3, device='cuda')
    assert m.weight.device.type == 'cuda' and m.bias.device.type == 'cuda'


def test_initialize_with_16_bit_floats():
    m = nn.Linear(5, 3, dtype=torch.half)
    assert m.weight.dtype is torch.float16 and m.bias.dtype is torch.float16


def test_skip_init_then_orthogonal():
    m = torch.nn.utils.skip_init(nn.Linear, 5, 3)
    nn.init.orthogonal_(m.weight)
    w = m.weight.detach().numpy().astype(np.float64)
    np.testing.assert_allclose(w @ w.T, np.eye(3), atol=1e-5)


def test_float_buffers_follow_dtype(capsys):
    m = nn.BatchNorm2d(3, dtype=torch.half)
    print(m.running_mean)
    assert capsys.readouterr().out == "tensor([0., 0., 0.], dtype=corenn.float16)\n"
    assert m.num_batches_tracked.dtype is torch.int64  # integer buffers keep their dtype


def test_custom_module_following_the_conventions():
    class Custom(nn.Module):
        def __init__(self, n, device=None, dtype=None):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(n, n, device=device, dtype=dtype))
            self.register_buffer("scale", torch.empty(n, device=device, dtype=dtype))
            self.reset_parameters()

        def reset_parameters(self):
            nn.init.eye_(self.weight)
            nn.init.ones_(self.scale)

    m = Custom(2, dtype=torch.float64)
    assert m.weight.dtype is torch.float64 and m.scale.dtype is torch.float64
    assert m.weight.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    skipped = torch.nn.utils.skip_init(Custom, 2)
    assert skipped.weight.shape == (2, 2)
