"""Seed note "Modules", section "Module Hooks": the forward/backward hook example, values checked."""
import numpy as np
import pytest

import corenn as torch
from corenn import nn


def forward_pre_hook(m, inputs):
    # Allows for examination and modification of the input before the forward pass.
    # Note that inputs are always wrapped in a tuple.
    input = inputs[0]
    return input + 1.


def forward_hook(m, inputs, output):
    # Allows for examination of inputs / outputs and modification of the outputs
    # after the forward pass. Note that inputs are always wrapped in a tuple while outputs
    # are passed as-is.

    # Residual computation a la ResNet.
    return output + inputs[0]


def backward_hook(m, grad_inputs, grad_outputs):
    # Allows for examination of grad_inputs / grad_outputs and modification of
    # grad_inputs used in the rest of the backwards pass. Note that grad_inputs and
    # grad_outputs are always wrapped in tuples.
    new_grad_inputs = [torch.ones_like(gi) * 42. for gi in grad_inputs]
    return new_grad_inputs


def test_the_notes_hook_example(capsys):
    torch.manual_seed(1)
    m = nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    xv = x.detach().numpy()

    plain = m(x)
    print('output with no forward hooks: {}'.format(plain))
    np.testing.assert_allclose(plain.detach().numpy(), xv @ w.T + b, rtol=1e-5, atol=1e-6)

    forward_pre_hook_handle = m.register_forward_pre_hook(forward_pre_hook)
    pre = m(x)
    print('output with forward pre hook: {}'.format(pre))
    np.testing.assert_allclose(pre.detach().numpy(), (xv + 1) @ w.T + b, rtol=1e-5, atol=1e-6)

    forward_hook_handle = m.register_forward_hook(forward_hook)
    both = m(x)
    print('output with both forward hooks: {}'.format(both))
    np.testing.assert_allclose(both.detach().numpy(), (xv + 1) @ w.T + b + (xv + 1), rtol=1e-5, atol=1e-6)
    assert both.grad_fn.name() == "AddBackward0"

    forward_pre_hook_handle.remove()
    forward_hook_handle.remove()
    after = m(x)
    print('output after removing forward hooks: {}'.format(after))
    assert torch.equal(after, plain)

    m(x).sum().backward()
    print('x.grad with no backwards hook: {}'.format(x.grad))
    column_sums = w.sum(axis=0)
    np.testing.assert_allclose(x.grad.numpy(), np.stack([column_sums, column_sums]), rtol=1e-5)

    # Clear gradients before running backward pass again.
    m.zero_grad()
    x.grad.zero_()

    m.register_full_backward_hook(backward_hook)
    m(x).sum().backward()
    print('x.grad with backwards hook: {}'.format(x.grad))
    lines = capsys.readouterr().out.split("\n")
    assert lines[0].startswith("output with no forward hooks: tensor([[")
    # (the note indents continuation lines under its output marker; print itself indents by 8, as PyTorch does)
    assert lines[-3:] == ["x.grad with backwards hook: tensor([[42., 42., 42.],",
                          "        [42., 42., 42.]])", ""]


@pytest.mark.torch
def test_the_notes_hook_example_matches_torch(torch):
    import corenn

    def run(lib):
        m = lib.nn.Linear(3, 3)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(np.arange(9.0, dtype=np.float32).reshape(3, 3) / 10))
            m.bias.copy_(lib.tensor([0.1, -0.2, 0.3]))
        x = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        outs = [m(x)]
        h1 = m.register_forward_pre_hook(lambda mod, inputs: inputs[0] + 1.)
        outs.append(m(x))
        h2 = m.register_forward_hook(lambda mod, inputs, output: output + inputs[0])
        outs.append(m(x))
        h1.remove()
        h2.remove()
        outs.append(m(x))
        m(x).sum().backward()
        grads = [x.grad.clone()]
        m.zero_grad()
        x.grad.zero_()
        m.register_full_backward_hook(lambda mod, gi, go: [lib.ones_like(g) * 42. for g in gi])
        m(x).sum().backward()
        grads.append(x.grad.clone())
        return [o.detach().numpy() for o in outs + grads] + [m.weight.grad.numpy()]

    for c, t in zip(run(corenn), run(torch)):
        np.testing.assert_allclose(c, t, rtol=1e-6, atol=1e-6)
