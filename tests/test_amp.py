"""corenn.amp.autocast op by op against torch.autocast, and GradScaler's dynamic loss scaling on float16 (cpu)."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def both(array):
    return corenn.tensor(array), torch.tensor(array)


OPS = {  # name -> f(module, functional, x (4x8), w (3x8), image (1x2x5x5), kernel (3x2x3x3), target)
    "linear": lambda m, f, x, w, i, k, t: f.linear(x, w),
    "matmul": lambda m, f, x, w, i, k, t: x @ w.T,
    "mm": lambda m, f, x, w, i, k, t: m.mm(x, w.T),
    "bmm": lambda m, f, x, w, i, k, t: m.bmm(x[None], w.T[None]),
    "addmm": lambda m, f, x, w, i, k, t: m.addmm(m.zeros(3), x, w.T),
    "baddbmm": lambda m, f, x, w, i, k, t: m.baddbmm(m.zeros(1, 4, 3), x[None], w.T[None]),
    "einsum": lambda m, f, x, w, i, k, t: m.einsum("ij,kj->ik", x, w),
    "conv2d": lambda m, f, x, w, i, k, t: f.conv2d(i, k),
    "conv_transpose2d": lambda m, f, x, w, i, k, t: f.conv_transpose2d(i, k.transpose(0, 1)),
    "scaled_dot_product_attention": lambda m, f, x, w, i, k, t: f.scaled_dot_product_attention(x[None], x[None], x[None]),
    "relu_after_linear": lambda m, f, x, w, i, k, t: f.relu(f.linear(x, w)),
    "softmax_after_linear": lambda m, f, x, w, i, k, t: f.softmax(f.linear(x, w), 1),
    "log_softmax_after_linear": lambda m, f, x, w, i, k, t: f.log_softmax(f.linear(x, w), 1),
    "layer_norm_after_linear": lambda m, f, x, w, i, k, t: f.layer_norm(f.linear(x, w), (3,)),
    "cross_entropy": lambda m, f, x, w, i, k, t: f.cross_entropy(f.linear(x, w), t),
    "nll_loss": lambda m, f, x, w, i, k, t: f.nll_loss(f.log_softmax(f.linear(x, w), 1), t),
    "mse_loss": lambda m, f, x, w, i, k, t: f.mse_loss(f.linear(x, w), f.linear(x, w)),
    "l1_loss": lambda m, f, x, w, i, k, t: f.l1_loss(f.linear(x, w), f.linear(x, w)),
    "smooth_l1_loss": lambda m, f, x, w, i, k, t: f.smooth_l1_loss(f.linear(x, w), f.linear(x, w)),
    "binary_cross_entropy_with_logits":
        lambda m, f, x, w, i, k, t: f.binary_cross_entropy_with_logits(f.linear(x, w), f.linear(x, w).sigmoid()),
    "prod": lambda m, f, x, w, i, k, t: f.linear(x, w).prod(),
    "add_mixed": lambda m, f, x, w, i, k, t: f.linear(x, w) + x[:, :3],
    "float64_stays": lambda m, f, x, w, i, k, t: f.linear(x.double(), w.double()),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_dtypes_and_values_match_torch_autocast(name, dtype):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((3, 8), dtype=np.float32)
    image, kernel = rng.standard_normal((1, 2, 5, 5), dtype=np.float32), rng.standard_normal((3, 2, 3, 3), dtype=np.float32)
    target = np.array([0, 1, 2, 0])
    ours_in = [corenn.tensor(a) for a in (x, w, image, kernel, target)]
    theirs_in = [torch.tensor(a) for a in (x, w, image, kernel, target)]
    with corenn.amp.autocast("cpu", dtype=getattr(corenn, dtype)):
        ours = OPS[name](corenn, F, *ours_in)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        theirs = OPS[name](torch, TF, *theirs_in)
    assert ours.dtype.name == str(theirs.dtype).split(".")[-1]
    expected = theirs.float().detach().numpy()
    # Within the lower precision's tolerance: a few ulps of the result's magnitude.
    ulp = 2 ** -7 if dtype == "bfloat16" else 2 ** -10
    np.testing.assert_allclose(ours.float().detach().numpy(), expected, rtol=8 * ulp, atol=8 * ulp * (abs(expected).max() + 1))


def test_small_model_forward_and_backward_match_torch_autocast_op_by_op():
    torch.manual_seed(0)
    model_t = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = corenn.nn.Sequential(corenn.nn.Linear(8, 16), corenn.nn.ReLU(), corenn.nn.Linear(16, 4))
    model.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in model_t.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((5, 8), dtype=np.float32)
    target = np.array([0, 1, 2, 3, 0])
    seen_ours, seen_theirs = [], []
    for module, seen in ((model, seen_ours), (model_t, seen_theirs)):
        for layer in module:
            layer.register_forward_hook(lambda mod, inp, out, seen=seen: seen.append(str(out.dtype).split(".")[-1]))
    with corenn.amp.autocast("cpu", dtype=corenn.bfloat16):
        loss = F.cross_entropy(model(corenn.tensor(x)), corenn.tensor(target))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_t = TF.cross_entropy(model_t(torch.tensor(x)), torch.tensor(target))
    assert seen_ours == seen_theirs == ["bfloat16", "bfloat16", "bfloat16"]
    assert loss.dtype is corenn.float32 and loss_t.dtype is torch.float32
    assert abs(loss.item() - loss_t.item()) < 2e-2
    loss.backward()
    loss_t.backward()
    for (name, p), p_t in zip(model.named_parameters(), model_t.parameters()):
        assert p.grad.dtype is corenn.float32, name  # gradients reach float32 parameters in float32
        np.testing.assert_allclose(p.grad.numpy(), p_t.grad.numpy(), atol=3e-2, rtol=5e-2)


def test_regions_nest_disable_and_end():
    x = corenn.ones(2, 2)
    with corenn.amp.autocast("cpu"):
        assert (x @ x).dtype is corenn.bfloat16
        with corenn.amp.autocast("cpu", enabled=False):
            assert (x @ x).dtype is corenn.float32
        with corenn.amp.autocast("cpu", dtype=corenn.float16):
            assert (x @ x).dtype is corenn.float16
        assert (x @ x).dtype is corenn.bfloat16
    assert (x @ x).dtype is corenn.float32

    @corenn.amp.autocast("cpu")
    def decorated():
        return x @ x
    assert decorated().dtype is corenn.bfloat16


def test_cuda_autocast_without_cuda_warns_and_changes_nothing_as_torch():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        region = corenn.amp.autocast("cuda")
    with region:
        assert (corenn.ones(2, 2) @ corenn.ones(2, 2)).dtype is corenn.float32
    with pytest.warns(UserWarning, match="not available"):
        corenn.cuda.amp.autocast()
    with pytest.warns(UserWarning, match="Disabling"):
        assert not corenn.cuda.amp.GradScaler().is_enabled()
    scaler = corenn.cuda.amp.GradScaler(enabled=False)  # nanoGPT's line on a cpu machine
    loss = corenn.tensor(2.0)
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0
    with corenn.cpu.amp.autocast():
        assert (corenn.ones(2, 2) @ corenn.ones(2, 2)).dtype is corenn.bfloat16


def _float16_step(scaler, model, optimizer, x, y):
    optimizer.zero_grad()
    with corenn.amp.autocast("cpu", dtype=corenn.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss


def test_grad_scaler_trains_a_float16_autocast_model_like_torch():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((32, 4), dtype=np.float32), rng.standard_normal((32, 1), dtype=np.float32)
    torch.manual_seed(0)
    model_t = torch.nn.Linear(4, 1)
    model = corenn.nn.Linear(4, 1)
    model.load_state_dict({k: corenn.tensor(v.numpy()) for k, v in model_t.state_dict().items()})
    opt, opt_t = corenn.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model_t.parameters(), lr=0.1)
    scaler, scaler_t = corenn.amp.GradScaler("cpu", growth_interval=3), torch.amp.GradScaler("cpu", growth_interval=3)
    for _ in range(7):
        _float16_step(scaler, model, opt, corenn.tensor(x), corenn.tensor(y))
        opt_t.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss_t = TF.mse_loss(model_t(torch.tensor(x)), torch.tensor(y))
        scaler_t.scale(loss_t).backward()
        scaler_t.step(opt_t)
        scaler_t.update()
    assert scaler.get_scale() == scaler_t.get_scale()
    np.testing.assert_allclose(model.weight.detach().numpy(), model_t.weight.detach().numpy(), atol=2e-3)
    assert set(scaler.state_dict()) == set(scaler_t.state_dict())


def test_grad_scaler_skips_steps_with_inf_gradients_and_backs_off():
    model = corenn.nn.Linear(4, 1)
    before = model.weight.detach().clone()
    optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
    scaler = corenn.amp.GradScaler("cpu", init_scale=2.0 ** 60)  # float16 gradients overflow at this scale
    x, y = corenn.randn(8, 4) * 100, corenn.randn(8, 1)
    _float16_step(scaler, model, optimizer, x, y)
    assert scaler.get_scale() == 2.0 ** 59
    assert corenn.equal(model.weight.detach(), before)  # the step was skipped
    scaler = corenn.amp.GradScaler("cpu", init_scale=1024.0)
    _float16_step(scaler, model, optimizer, corenn.randn(8, 4), y)
    assert scaler.get_scale() == 1024.0
    assert not corenn.equal(model.weight.detach(), before)


def test_unscale_before_clipping_and_its_errors():
    model = corenn.nn.Linear(4, 1)
    optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
    scaler = corenn.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale(model(corenn.ones(2, 4)).sum()).backward()
    scaled = model.weight.grad.clone()
    scaler.unscale_(optimizer)
    assert corenn.allclose(model.weight.grad * 1024, scaled)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(optimizer)
    corenn.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)  # does not unscale twice
    with pytest.raises(RuntimeError, match="step"):
        scaler.step(optimizer)
    scaler.update()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(optimizer, closure=lambda: 0)
