"""Port of the PyTorch recipe "Automatic Mixed Precision" (``recipes/recipes/amp_recipe``) on the CPU with
bfloat16: ``torch.autocast`` around the forward pass, ``GradScaler`` around the backward pass and the
step, ``unscale_`` before gradient clipping, and the scaler's state in a checkpoint.

Written once against ``lib`` and run under PyTorch and corenn from the same weights. It keeps the
recipe's ``make_model`` (``Linear``/``ReLU`` layers in ``nn.Sequential(*tuple(layers))``), its data as
lists of random batches (drawn by numpy here), ``nn.MSELoss``, ``optim.SGD(lr=0.001)``, the loop
``with torch.autocast(device_type=device, dtype=..., enabled=use_amp):`` with its dtype checks
(``output.dtype is torch.bfloat16``, ``loss.dtype is torch.float32``), ``scaler =
torch.amp.GradScaler(device, enabled=use_amp)``, ``scaler.scale(loss).backward()``,
``scaler.unscale_(opt)``, ``clip_grad_norm_(net.parameters(), max_norm=0.1)``, ``scaler.step(opt)``,
``scaler.update()``, ``opt.zero_grad(set_to_none=True)``, and ``checkpoint = {"model": ...,
"optimizer": ..., "scaler": scaler.state_dict()}`` loaded back with ``scaler.load_state_dict``.
The widths are 64 instead of 4096, and the recipe's CUDA float16 is the CPU's bfloat16.
"""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from _port import assert_same_run, assert_same_state, numpy_state, same_weights

pytestmark = pytest.mark.torch

IN_SIZE, OUT_SIZE, NUM_LAYERS = 64, 32, 3
device = "cpu"


def make_model(lib, in_size=IN_SIZE, out_size=OUT_SIZE, num_layers=NUM_LAYERS):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(lib.nn.Linear(in_size, in_size))
        layers.append(lib.nn.ReLU())
    layers.append(lib.nn.Linear(in_size, out_size))
    return lib.nn.Sequential(*tuple(layers))


def train(lib, net, data, targets, use_amp=True, epochs=2):
    loss_fn = lib.nn.MSELoss()
    opt = lib.optim.SGD(net.parameters(), lr=0.001)
    scaler = lib.amp.GradScaler(device, enabled=use_amp)
    losses, scales = [], []
    for epoch in range(epochs):
        for input, target in zip(data, targets):
            input, target = lib.from_numpy(input), lib.from_numpy(target)
            with lib.autocast(device_type=device, dtype=lib.bfloat16, enabled=use_amp):
                output = net(input)
                assert output.dtype is (lib.bfloat16 if use_amp else lib.float32)
                loss = loss_fn(output, target)
                assert loss.dtype is lib.float32  # mse_loss autocasts to float32
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.1)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            scales.append(scaler.get_scale())
    checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict()}
    resumed = lib.amp.GradScaler(device, enabled=use_amp)
    if use_amp:  # a disabled scaler's state dict is empty, and loading one raises
        resumed.load_state_dict(checkpoint["scaler"])
    return losses, scales, resumed.get_scale()


def _data(seed=0, batches=4, batch_size=16):
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal((batch_size, IN_SIZE)).astype(np.float32) for _ in range(batches)],
            [rng.standard_normal((batch_size, OUT_SIZE)).astype(np.float32) for _ in range(batches)])


@pytest.mark.parametrize("use_amp", [True, False], ids=["amp", "default_precision"])
def test_amp_recipe_trains_the_same_in_both_frameworks(torch, use_amp):
    data, targets = _data()
    theirs, ours = same_weights(torch, make_model)
    start = numpy_state(theirs)
    their_losses, their_scales, their_resumed = train(torch, theirs, data, targets, use_amp)
    our_losses, our_scales, our_resumed = train(corenn, ours, data, targets, use_amp)
    # bfloat16 keeps 8 bits of mantissa: a product summed in float32 in another order (another CPU's
    # kernel) may round to the neighbouring bfloat16 value, 0.4% away, and move a mean of many such
    # values by far less; in float32 the usual tolerances hold
    rtol, atol = (1e-3, 1e-4) if use_amp else (1e-4, 1e-5)
    assert_same_run(our_losses, their_losses, rtol=rtol, atol=atol)
    assert our_scales == their_scales and our_resumed == their_resumed
    assert_same_state(ours, theirs, rtol=rtol, atol=atol, moved_from=start)
