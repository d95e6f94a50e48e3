"""Every op of the conformance table on every registered device: forward vs reference, backward vs gradcheck.

The table lives in ``corenn.testing.opcheck`` so that plugins reuse it; these tests
run it against the core, once with numpy references (no torch needed), once with
PyTorch as the oracle, and on hypothesis-drawn shapes (broadcasting, 0-d, empty).
Meta-tests hold the table to the registry (every core kernel has a case that really
runs it), and the whole kit runs on the strict test device (tests/strict_device),
whose arrays refuse silent conversion to the host.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import corenn
from corenn.dispatch import KernelRegistration, kernels
from corenn.kernels import core_kernels
from corenn.testing import opcheck, register_plugin
from corenn.testing.opcheck import (ConformanceError, Float, Index, OpCase, check_op, functional, opcheck_params,
                                    run_conformance)


def _primary(outcome):
    """The external reference of a check_op outcome ("numpy+core" -> "numpy"; "core" -> "none")."""
    first = outcome.split("+")[0]
    return "none" if first == "core" else first


@pytest.mark.parametrize("case, device", opcheck_params())
def test_op_against_numpy_and_gradcheck(case, device):
    reference = "numpy" if case.ref is not None else "none"
    assert _primary(check_op(case, device, reference=reference)) == reference


@pytest.mark.torch
@pytest.mark.parametrize("case, device", opcheck_params())
def test_op_against_torch(case, device, torch):
    if not case.torch:
        pytest.skip("no PyTorch expression for this case")
    # forward values and dtypes, and gradients (a vector-Jacobian product) against PyTorch's
    assert check_op(case, device, reference="torch", finite_differences=False) in ("torch", "torch+core")


BROADCASTING = [c for c in opcheck.CASES if c.broadcast]


@pytest.mark.parametrize("case", BROADCASTING, ids=[c.id for c in BROADCASTING])
@settings(max_examples=8)
@given(data=st.data())
def test_op_on_drawn_shapes(case, data):
    """Gradcheck (float64) and oracle on shapes hypothesis draws: broadcasting, 0-d and empty included."""
    n_float = sum(isinstance(a, Float) for a in case.args)
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=n_float, min_dims=0, max_dims=3,
                                                         min_side=0, max_side=3), label="shapes")
    drawn = case.with_shapes(shapes.input_shapes)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    check_op(drawn, "cpu", seed=seed)


def test_run_conformance_reports_every_case():
    results = run_conformance("cpu", ops=["add", "matmul"], reference="numpy")
    ids = [case_id for case_id, _ in results]
    assert ids == [c.id for c in opcheck.cases(["add", "matmul"])]
    assert {_primary(outcome) for _, outcome in results} == {"numpy", "none"}


def test_unknown_op_names_raise():
    with pytest.raises(ValueError, match="no conformance cases for \\['no_such_op'\\]"):
        opcheck.cases(["no_such_op"])


def test_wrong_forward_is_caught():
    case = OpCase("exp", lambda lib, x: lib.exp(x) * 1.001, [Float((3,))], ref=np.exp)
    with pytest.raises(ConformanceError, match=r"exp\[3\] on cpu: float32 output 0 differs from the reference "
                                               r"\(the case's numpy reference\): 3 of 3 elements; max abs error"):
        check_op(case, reference="numpy")


def test_wrong_backward_in_a_plugin_kernel_is_caught():
    """A kernel registered over the core's (as a plugin does) with a wrong backward fails the kit."""
    core_exp = kernels.lookup("exp", "cpu")

    class WrongExp(core_exp):
        @staticmethod
        def backward(ctx, grad):
            return core_exp.backward(ctx, grad) * 1.5

    kernels.register(KernelRegistration(op="exp", device_type="cpu", kernel=WrongExp, priority=100,
                                        source="test-wrong-exp"))
    try:
        assert kernels.lookup("exp", "cpu") is WrongExp
        results = run_conformance("cpu", ops=["exp"], reference="numpy", raise_on_failure=False)
        # caught by the vector-Jacobian product against the core's exp, before finite differences
        assert results and all("gradient of input 0 differs from the reference (the core kernels on cpu)" in outcome
                               for _, outcome in results)
        with pytest.raises(ConformanceError, match="1 of 1 cases failed on cpu"):
            run_conformance("cpu", ops=["exp"], reference="numpy")
    finally:
        kernels.unregister_source("test-wrong-exp")
    assert kernels.lookup("exp", "cpu") is core_exp


def test_wrong_custom_function_gradient_is_caught():
    class Broken(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3  # should be grad * 2

    case = OpCase("custom", lambda lib, x: Broken.apply(x), [Float((3,))], torch=False)
    with pytest.raises(ConformanceError, match="gradcheck failed.*Jacobian mismatch"):
        check_op(case, reference="none")


def test_every_device_is_listed():
    assert "cpu" in opcheck.available_devices()
    params = opcheck_params(ops=["add"])
    assert {p.values[1] for p in params} == set(opcheck.available_devices())


# -- the table covers the registry ---------------------------------------------------------------------------

def test_every_core_kernel_has_a_case():
    """A core kernel without a case (or a justified entry in opcheck.EXEMPT) fails here, by name."""
    missing = opcheck.uncovered_kernels()
    assert not missing, (f"{len(missing)} core kernels have no conformance case in corenn/testing/opcheck.py "
                         f"(add an OpCase with kernels=(...), or an EXEMPT entry with the reason): {missing}")


def test_exemptions_are_few_and_justified():
    core = core_kernels()
    claimed = {k for case in opcheck.CASES for k in case.kernel_names}
    assert len(opcheck.EXEMPT) <= 5
    for op, reason in opcheck.EXEMPT.items():
        assert op in core, f"EXEMPT names {op!r}, which is not a core kernel"
        assert op not in claimed, f"EXEMPT names {op!r}, which has a case: drop the exemption"
        assert isinstance(reason, str) and len(reason) > 20, f"EXEMPT[{op!r}] needs a reason"


def test_cases_run_the_kernels_they_claim():
    """Each case's kernels (``kernels=`` or its op name, where that is a core kernel) really run in the case.

    A spy kernel over every core kernel records which forwards run, including the optimizer
    update kernels that ``corenn.optim`` looks up without the dispatcher's ``run``.
    """
    core = core_kernels()
    ran = set()

    def spy(op, kernel):
        def forward(ctx, *args, **kwargs):
            ran.add(op)
            return kernel.forward(ctx, *args, **kwargs)
        return type(f"Spy{kernel.__name__}", (kernel,), {"forward": staticmethod(forward)})

    for op, kernel in core.items():
        kernels.register(KernelRegistration(op=op, device_type="cpu", kernel=spy(op, kernel), priority=10**6,
                                            source="test-spy"))
    wrong = []
    try:
        for case in opcheck.CASES:
            claimed = {k for k in case.kernel_names if k in core}
            if case.kernels:
                assert set(case.kernels) <= set(core), f"{case.id} claims unknown kernels {case.kernels}"
            ran.clear()
            rng = np.random.default_rng(0)
            arrays = [spec.make(rng, np.float64) for spec in case.args]
            case.fn(corenn, *[corenn.tensor(a) for a in arrays])
            if case.grad:  # recording a graph may take other kernels (setitem: index_put)
                case.fn(corenn, *[corenn.tensor(a, requires_grad=isinstance(spec, Float) and spec.grad)
                                  for a, spec in zip(arrays, case.args)])
            if not claimed <= ran:
                wrong.append(f"{case.id} claims {sorted(claimed - ran)} but runs {sorted(ran)}")
    finally:
        kernels.unregister_source("test-spy")
    assert not wrong, "\n".join(wrong)


def test_cases_select_by_public_or_kernel_name():
    by_kernel = opcheck.cases(["conv"])
    assert {c.op for c in by_kernel} == {"conv1d", "conv2d", "conv3d"}
    assert opcheck.cases(["conv2d"]) == [c for c in by_kernel if c.op == "conv2d"]
    assert {c.op for c in opcheck.cases(["sgd_update"])} == {"SGD"}


# -- overrides are compared with the core's own kernels, on the host ---------------------------------------

def _override(op, forward=None, backward=None, priority=100):
    """A plugin whose kernel for ``op`` on cpu replaces the core's forward and/or backward."""
    core = core_kernels()[op]
    body = {}
    if forward is not None:
        body["forward"] = staticmethod(forward)
    if backward is not None:
        body["backward"] = staticmethod(backward)
    kernel = type(f"Test{core.__name__}", (core,), body)

    class Plugin:
        @corenn.hookimpl
        def corenn_register_kernels(self):
            return [KernelRegistration(op=op, device_type="cpu", kernel=kernel, priority=priority)]
    return Plugin()


def test_wrong_forward_with_matching_backward_is_caught_without_torch():
    """A ``gelu`` override returning ``2*x`` with a backward that matches it passes gradcheck and has no numpy
    reference: only the comparison with the core's gelu on the host catches it, torch or not."""
    def forward(ctx, a, approximate="none"):
        return a * 2

    def backward(ctx, grad):
        return grad * 2

    with register_plugin(_override("gelu", forward, backward), name="bad-gelu"):
        assert kernels.lookup("gelu", "cpu").__name__ == "TestGelu"
        for reference in ("none", "auto"):
            results = run_conformance("cpu", ops=["gelu"], reference=reference, raise_on_failure=False)
            assert len(results) == 2
            assert all("differs from the reference (the core kernels on cpu)" in outcome
                       or "differs from the reference (PyTorch)" in outcome for _, outcome in results), results
        with pytest.raises(ConformanceError, match=r"2 of 2 cases failed on cpu:\n"
                                                   r"gelu\[2x3\]: FAIL: ConformanceError: gelu\[2x3\] on cpu: float32 "
                                                   r"output 0 differs from the reference \(the core kernels on cpu\): "
                                                   r"\d+ of 6 elements; max abs error [0-9.e+-]+, max rel error"):
            run_conformance("cpu", ops=["gelu"], reference="none")
    assert kernels.lookup("gelu", "cpu") is core_kernels()["gelu"]


def test_wrong_backward_is_caught_by_the_core_vjp():
    """A backward that is wrong by a factor is caught by the vector-Jacobian product against the core."""
    core = core_kernels()["softsign"]
    with register_plugin(_override("softsign", backward=lambda ctx, grad: core.backward(ctx, grad) * 1.01),
                         name="bad-softsign"):
        case = opcheck.cases(["softsign"])[0]
        with pytest.raises(ConformanceError, match=r"gradient of input 0 differs from the reference "
                                                   r"\(the core kernels on cpu\)"):
            check_op(case, "cpu", reference="none", finite_differences=False)


def test_a_correct_override_reports_the_core_as_reference():
    core = core_kernels()["gelu"]
    with register_plugin(_override("gelu", forward=core.forward), name="same-gelu"):
        assert check_op(opcheck.cases(["gelu"])[0], "cpu", reference="none") == "core"
        assert check_op(opcheck.cases(["exp"])[0], "cpu", reference="numpy") == "numpy"  # core kernels: no core run


# -- the strict device: the kit keeps every array on the device -------------------------------------------

def test_whole_kit_passes_on_the_strict_device(strict_device):
    """Every case on a device whose arrays are not ndarrays and refuse silent host conversion."""
    results = run_conformance(device="strict")
    assert len(results) == len(opcheck.CASES)
    assert all(outcome.endswith("core") for _, outcome in results)


def test_kit_on_a_second_strict_index_without_torch(strict_device):
    results = run_conformance(device="strict:1", ops=["add", "conv", "cross_entropy", "sgd_update", "dropout"],
                              reference="numpy")
    assert {outcome for _, outcome in results} <= {"numpy+core", "core"}


def test_gradcheck_on_the_strict_device(strict_device):
    x = corenn.tensor(np.linspace(-1, 1, 6).reshape(2, 3), device="strict:1", requires_grad=True)
    w = corenn.tensor(np.linspace(0.5, 2, 3), device="strict:1", requires_grad=True)
    assert corenn.autograd.gradcheck(lambda a, b: (a * b).tanh().sum(0), (x, w))
    assert str(x.device) == "strict:1" and x.grad is None  # inputs are left alone

    class Broken(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    with pytest.raises(corenn.autograd.GradcheckError, match="(?s)Jacobian mismatch.*max abs error 1"):
        corenn.autograd.gradcheck(Broken.apply, (x,))


def test_a_wrong_device_kernel_fails_on_the_strict_device(strict_device):
    """On a device, every op is compared with the core on the host: a device-only bug can't hide."""
    core = core_kernels()["exp"]

    class WrongExp(core):
        @staticmethod
        def forward(ctx, a):
            return core.forward(ctx, a) + 1e-3

    kernels.register(KernelRegistration(op="exp", device_type="strict", kernel=WrongExp, priority=5,
                                        source="test-strict-exp"))
    try:
        with pytest.raises(ConformanceError, match=r"exp\[2x3\] on strict:0: float32 output 0 differs"):
            run_conformance("strict", ops=["exp"], reference="none")
    finally:
        kernels.unregister_source("test-strict-exp")


# Ops that take any tensor with at least one dimension: gradchecked on drawn shapes (empty where defined).
ANY_SHAPE = [
    ("sum", lambda lib, x: x.sum(-1), 0), ("sum-all", lambda lib, x: x.sum(), 0),
    ("mean", lambda lib, x: x.mean(-1), 1), ("prod", lambda lib, x: x.prod(-1), 0),
    ("logsumexp", lambda lib, x: lib.logsumexp(x, -1), 1), ("softmax", lambda lib, x: lib.softmax(x, -1), 0),
    ("log_softmax", lambda lib, x: lib.log_softmax(x, -1), 0), ("cumsum", lambda lib, x: x.cumsum(-1), 0),
    ("cumprod", lambda lib, x: x.cumprod(0), 0), ("flip", lambda lib, x: lib.flip(x, (-1,)), 0),
    ("roll", lambda lib, x: x.roll(1, -1), 0), ("transpose", lambda lib, x: x.transpose(0, -1), 0),
    ("unsqueeze", lambda lib, x: x.unsqueeze(0), 0), ("flatten", lambda lib, x: x.flatten(), 0),
    ("reshape", lambda lib, x: x.reshape(-1, 1), 0), ("var", lambda lib, x: x.var(-1), 2),
    ("norm", lambda lib, x: x.norm(dim=-1), 1), ("amax", lambda lib, x: lib.amax(x, -1), 1),
    ("getitem", lambda lib, x: x[..., ::2], 0), ("cat", lambda lib, x: lib.cat([x, x * 2], -1), 0),
    ("stack", lambda lib, x: lib.stack([x, x], 0), 0), ("tril", lambda lib, x: x.unsqueeze(0).tril(), 0),
]


@pytest.mark.parametrize("name, fn, min_side", ANY_SHAPE, ids=[n for n, _, _ in ANY_SHAPE])
@settings(max_examples=6)
@given(data=st.data())
def test_shape_ops_on_drawn_shapes(name, fn, min_side, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=min_side, max_side=3), label="shape")
    case = OpCase(name, fn, [Float(shape, distinct=name == "amax")], rtol=1e-4, atol=1e-5)
    check_op(case, "cpu", seed=data.draw(st.integers(0, 2**16), label="seed"))


# Ops whose inputs must agree on some sizes: shapes drawn together, then gradchecked and compared with
# PyTorch where it is installed, so gathers, scatters, products and pads see more than fixed shapes.
try:
    import torch  # noqa: F401 -- imported, it becomes check_op's reference (corenn never imports it)
except ImportError:
    pass
sides = st.integers(1, 3)


@settings(max_examples=8)
@given(data=st.data())
def test_matmul_on_drawn_broadcast_shapes(data):
    m, k, n = data.draw(sides), data.draw(sides), data.draw(sides)
    batch = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=2), label="batch")
    # a 1 in either operand's batch dims broadcasts against the other
    other_batch = tuple(1 if data.draw(st.booleans()) else b for b in batch)
    left = data.draw(st.sampled_from([(k,), batch + (m, k)]), label="left")
    right = data.draw(st.sampled_from([(k,), other_batch + (k, n)]), label="right")
    case = OpCase("matmul", lambda lib, a, b: lib.matmul(a, b), [Float(left), Float(right)], rtol=1e-4, atol=1e-5)
    check_op(case, "cpu", seed=data.draw(st.integers(0, 2**16)))


@settings(max_examples=8)
@given(data=st.data())
def test_gather_scatter_index_select_on_drawn_shapes(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), label="shape")
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    axis = dim % len(shape)
    index_shape = tuple(data.draw(st.integers(1, s)) if d != axis else data.draw(st.integers(1, 5))
                        for d, s in enumerate(shape))
    seed = data.draw(st.integers(0, 2**16))
    gather = OpCase("gather", lambda lib, x, i: lib.gather(x, dim, i),
                    [Float(shape), Index(index_shape, high=shape[axis])], rtol=1e-5)
    check_op(gather, "cpu", seed=seed)
    # scatter_add: repeated indices accumulate into the input's gradient-free positions
    scatter_add = OpCase("scatter_add", lambda lib, x, i, s: lib.scatter_add(x, dim, i, s),
                         [Float(shape), Index(index_shape, high=shape[axis]), Float(index_shape)], rtol=1e-5)
    check_op(scatter_add, "cpu", seed=seed)
    n = data.draw(st.integers(1, 5))
    index_select = OpCase("index_select", lambda lib, x, i: lib.index_select(x, dim, i),
                          [Float(shape), Index((n,), high=shape[axis])], rtol=1e-5)
    check_op(index_select, "cpu", seed=seed)


@settings(max_examples=8)
@given(data=st.data())
def test_einsum_and_pad_on_drawn_shapes(data):
    b, i, j, k = (data.draw(sides) for _ in range(4))
    seed = data.draw(st.integers(0, 2**16))
    batched = OpCase("einsum", lambda lib, x, y: lib.einsum("bij,bjk->bik", x, y),
                     [Float((b, i, j)), Float((b, j, k))], rtol=1e-4, atol=1e-5)
    check_op(batched, "cpu", seed=seed)
    reduced = OpCase("einsum", lambda lib, x, y: lib.einsum("ij,j->i", x, y), [Float((i, j)), Float((j,))],
                     rtol=1e-4, atol=1e-5)
    check_op(reduced, "cpu", seed=seed)
    shape = data.draw(hnp.array_shapes(min_dims=3, max_dims=4, min_side=2, max_side=4), label="pad shape")
    widths = tuple(data.draw(st.integers(0, 1)) for _ in range(4))
    mode = data.draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    pad = OpCase("pad", lambda lib, x: functional(lib).pad(x, widths, mode=mode), [Float(shape)], rtol=1e-5)
    check_op(pad, "cpu", seed=seed)
