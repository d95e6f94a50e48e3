"""corenn-numba under hostile input: the compiled entry points never trust their callers.

``_hostile_cases.py`` (run here in a subprocess, so that a crash in compiled code is reported
with the case that caused it instead of killing pytest) draws, with hypothesis:

- ops the plugin overrides, with hostile shapes (empty ones too), layouts (transposed,
  flipped: negative strides, every other element), dtypes and values (nan, +-inf, -0.0,
  1e20 .. 3e38, denormals), each run with the plugin and with the core: the same result or
  the same exception type;
- direct calls of every compiled entry point, with arguments recorded from real calls and
  one of them mutated: TypeError, ValueError or IndexError, never a crash.

The run is bounded in time: ``CORENN_HOSTILE_SECONDS`` (default 24) after the kernels are
loaded. The examples follow ``CORENN_HOSTILE_SEED`` (default 0, so that a run is a prefix of the
same sequence on any machine; ``random`` draws one, which a failure prints).

The other tests here check each entry point's own checks in-process, where a missing check
could only return garbage, not crash: the shapes they are given are consistent.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.kernels import fell_back
from corenn_numba import _checks

HERE = Path(__file__).parent


@pytest.mark.slow
def test_hostile_inputs_in_a_subprocess(tmp_path):
    seconds = float(os.environ.get("CORENN_HOSTILE_SECONDS", "24"))
    seed = os.environ.get("CORENN_HOSTILE_SEED", "0")
    seed = random.randrange(1 << 30) if seed == "random" else int(seed)
    log = tmp_path / "cases.log"
    command = [sys.executable, str(HERE / "_hostile_cases.py"), str(seconds), str(seed), str(log)]
    # Loading (or, on a fresh checkout, compiling) every kernel comes before the time budget starts.
    result = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 900, cwd=HERE)
    last = log.read_text().splitlines()[-1:] if log.exists() else []
    if result.returncode < 0:
        name = signal.Signals(-result.returncode).name
        pytest.fail(f"the hostile-input run crashed with {name} (seed {seed}) on the case:\n  {last}\n"
                    f"{result.stderr[-3000:]}")
    assert result.returncode == 0, (f"seed {seed}: a case failed (rerun: {' '.join(command)}); last case: "
                                    f"{last}\n{result.stdout[-2000:]}\n{result.stderr[-6000:]}")
    assert "entry points recorded" in result.stdout, result.stdout


# ---------------------------------------------------------------------------------------------------------
# the checks themselves
# ---------------------------------------------------------------------------------------------------------

JIT_MODULES = ("_gemm_jit", "_conv_jit", "_nn_jit", "_norms_jit", "_pooling_jit", "_scatter_jit", "_optim_jit",
               "_spin_jit", "_winograd_jit")


def _modules():
    return [__import__(f"corenn_numba.{name}", fromlist=["_"]) for name in JIT_MODULES]


def test_every_public_compiled_function_is_a_checked_entry_point():
    # A compiled function without a leading underscore is callable from Python: it must check its arguments.
    from numba.core.registry import CPUDispatcher

    entries = []
    for module in _modules():
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and not name.startswith("_"):
                pytest.fail(f"corenn_numba.{module.__name__}.{name} is compiled code without argument checks")
            if callable(value) and getattr(value, "compiled", None) is not None:
                assert not name.startswith("_"), name
                entries.append(name)
    assert len(entries) >= 33, entries


def test_matmul_with_a_short_bias_is_refused_before_the_loop_runs():
    # The SIGSEGV of issue 13: the bias was read for every output column, whatever its length.
    from corenn_numba import _gemm_jit as gemm
    from corenn_numba.linear import matmul

    a, b = np.ones((64, 300), np.float32), np.zeros((300, 200), np.float32)
    with pytest.raises(ValueError, match=r"matmul_columns\(\): argument 'bias' must have shape \(200,\), got \(1,\)"):
        matmul(a, b, np.ones(1, np.float32))
    columns = gemm.nr(np.float32)
    panels = np.zeros((-(-64 // gemm.MR), 300 * gemm.MR), np.float32)
    out = np.empty((64, 200), np.float32)
    with pytest.raises(ValueError, match="argument 'columns' must be in"):
        gemm.matmul_columns(0, 1, panels, 64, b, out, np.ones(200, np.float32), True, columns // 2)
    with pytest.raises(ValueError, match="argument 'last' must be in"):
        gemm.matmul_columns(0, 100, panels, 64, b, out, np.ones(200, np.float32), True, columns)
    with pytest.raises(TypeError, match="argument 'out' must be of dtype"):
        gemm.matmul_columns(0, 1, panels, 64, b, out.astype(np.float64), np.ones(200, np.float32), True, columns)


def test_entry_point_errors_name_the_function_and_the_argument():
    from corenn_numba import _nn_jit, _norms_jit, _pooling_jit, _scatter_jit

    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"softmax_rows\(\): argument 'out' must be C-contiguous"):
        _nn_jit.softmax_rows(x, np.ones(3, np.float32), np.ones((4, 3), np.float32).T, False)
    with pytest.raises(TypeError, match=r"softmax_rows\(\): argument 'log' must be a bool"):
        _nn_jit.softmax_rows(x, np.ones(3, np.float32), np.empty_like(x), 1)
    with pytest.raises(TypeError, match=r"row_norm\(\): argument 'x' must be a numpy array, not list"):
        _norms_jit.row_norm([[1.0]], None, None, 1e-5, None, None, None)
    with pytest.raises(ValueError, match=r"group_norm\(\): argument 'groups' must be in \[1, 4\], got 5"):
        _norms_jit.group_norm(np.ones((2, 4, 3)), 5, np.ones(4), np.ones(4), 1e-5, np.empty((2, 4, 3)),
                              np.empty((2, 5)), np.empty((2, 5)))
    with pytest.raises(ValueError, match=r"max_pool\(\): an output height of 5 does not match"):
        _pooling_jit.max_pool(np.ones((1, 1, 4, 4)), np.empty((1, 1, 5, 2)), np.empty((1, 1, 5, 2), np.int64),
                              2, 2, 2, 2, 0, 0, 1, 1)
    with pytest.raises(ValueError, match=r"add_flat\(\): argument 'values' must have shape \(3,\)"):
        _scatter_jit.add_flat(np.zeros(4), np.array([0, 1, 2]), np.ones(2))


def test_data_dependent_indices_are_checked_inside_the_loops():
    from corenn_numba import _nn_jit, _pooling_jit, _scatter_jit

    # Positions past the target: reported, nothing written.
    out = np.zeros(4)
    assert _scatter_jit.add_flat(out, np.array([0, 4]), np.ones(2)) == 1
    assert _scatter_jit.add_flat(out, np.array([-1]), np.ones(1)) == 0
    assert not out.any()
    # A saved argmax past its plane (only a caller's forgery can make one).
    grad_x = np.empty((1, 1, 2, 2), np.float32)
    bad = _pooling_jit.max_pool_backward(np.ones((1, 1, 1, 1), np.float32), np.array([[[[4]]]]), grad_x)
    assert bad == 0
    # A class index past the logits' classes.
    rows = np.zeros((2, 3), np.float32)
    args = (np.array([0, 3]), np.zeros(1, np.float32), False, -100, 0.0)
    assert _nn_jit.ce_forward(rows, rows.max(1), *args, np.empty(2), np.empty(2, np.float32), np.empty(2)) == 1


def test_checks_reject_strides_and_dtypes_the_kernels_were_not_built_for():
    from corenn_numba import _optim_jit

    p = np.ones(6, np.float32)
    scalars = [np.float32(v) for v in (0.1, 0.0, 1.0, 0.0)]
    with pytest.raises(ValueError, match=r"sgd_update\(\): argument 'g' must have shape \(6,\), got \(3,\)"):
        _optim_jit.sgd_serial(p, np.ones(12, np.float32)[::4], np.zeros(1, np.float32), *scalars, False, False,
                              False, False)
    with pytest.raises(TypeError, match=r"sgd_update\(\): argument 'lr' must be a float32 scalar, not float"):
        _optim_jit.sgd_serial(p, p.copy(), np.zeros(1, np.float32), 0.1, *scalars[1:], False, False, False, False)
    with pytest.raises(ValueError, match=r"sgd_update\(\): argument 'p' must be writeable"):
        readonly = p.copy()
        readonly.flags.writeable = False
        _optim_jit.sgd_serial(readonly, p, np.zeros(1, np.float32), *scalars, False, False, False, False)


def test_check_helpers():
    assert _checks.floats("f", "x", np.ones(2, np.float32)) == np.float32
    with pytest.raises(TypeError, match=r"f\(\): argument 'n' must be an int, not bool"):
        _checks.integer("f", "n", True)
    with pytest.raises(ValueError, match=r"f\(\): argument 'last' must be in \[2, 5\], got 6"):
        _checks.work_range("f", 2, 6, 5)


def test_public_ops_on_hostile_layouts_take_the_compiled_path_without_errors():
    # Transposed weights, flipped inputs and strided biases are ordinary: the kernels copy what they must.
    rng = np.random.default_rng(0)
    x = corenn.tensor(rng.standard_normal((32, 64)).astype(np.float32)).flip(-1)
    w = corenn.tensor(rng.standard_normal((64, 80)).astype(np.float32), requires_grad=True).transpose(0, 1)
    b = corenn.tensor(rng.standard_normal(160).astype(np.float32))[::2]
    out = F.linear(x, w, b)
    assert not fell_back(out.grad_fn)
    expected = x.numpy() @ w.detach().numpy().T + b.numpy()
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-4, atol=1e-4)
