"""What every porting test shares: run one program under PyTorch and under corenn from the same weights.

A ported program is written once against a framework module ``lib`` (``torch`` or ``corenn``):
the test runs it twice, a pure rename apart, and compares what the two runs saw.

    torch_model, corenn_model = same_weights(torch, build)   # build(lib) -> nn.Module
    assert_same_run(train(torch, torch_model, data), train(corenn, corenn_model, data))
    assert_same_state(corenn_model, torch_model)
"""
from __future__ import annotations

import numpy as np

import corenn

# float32 end to end; a few steps of training from the same start stay this close.
RTOL = 1e-4
ATOL = 1e-5


def to_numpy(value) -> np.ndarray:
    """A tensor of either framework (or a Python number) as a numpy array."""
    if hasattr(value, "detach"):
        return np.array(value.detach().cpu().numpy(), copy=True)
    return np.asarray(value)


def numpy_state(model) -> dict:
    """The model's state dict as numpy arrays, keyed as the model keys it."""
    return {name: to_numpy(value) for name, value in model.state_dict().items()}


def load_numpy_state(lib, model, state: dict) -> None:
    """Load a numpy state dict into a model of framework ``lib``, strictly (every key must match)."""
    model.load_state_dict({name: lib.from_numpy(array.copy()) for name, array in state.items()})


def same_weights(torch, build, *args, seed: int = 0, **kwargs):
    """Build the model in both frameworks with PyTorch's initial weights in each: (torch_model, corenn_model)."""
    torch.manual_seed(seed)
    theirs = build(torch, *args, **kwargs)
    ours = build(corenn, *args, **kwargs)
    state = numpy_state(theirs)
    assert sorted(numpy_state(ours)) == sorted(state), "the two models name their parameters differently"
    load_numpy_state(corenn, ours, state)
    return theirs, ours


def assert_same_run(ours, theirs, rtol: float = RTOL, atol: float = ATOL) -> None:
    """Two sequences of per-step results (losses, outputs) agree step by step, and the run did something."""
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs) > 0
    for step, (a, b) in enumerate(zip(ours, theirs)):
        a, b = to_numpy(a), to_numpy(b)
        assert a.shape == b.shape, f"step {step}: shape {a.shape} != {b.shape}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"step {step}")
    assert all(np.all(np.isfinite(to_numpy(a))) for a in ours)


def assert_same_state(ours, theirs, rtol: float = RTOL, atol: float = ATOL, moved_from: dict | None = None,
                      except_for: tuple = ()) -> None:
    """The two models' state dicts agree entry by entry; with ``moved_from``, training changed some parameter.

    ``except_for`` names entries not compared: a test that leaves one out says why next to the call.
    """
    a, b = numpy_state(ours), numpy_state(theirs)
    assert sorted(a) == sorted(b)
    assert set(except_for) <= set(b)
    for name in b:
        if name in except_for:
            continue
        assert a[name].dtype == b[name].dtype, f"{name}: dtype {a[name].dtype} != {b[name].dtype}"
        np.testing.assert_allclose(a[name], b[name], rtol=rtol, atol=atol, err_msg=name)
    if moved_from is not None:
        assert any(not np.array_equal(b[name], moved_from[name]) for name in b), "training changed no parameter"
