"""The op-conformance kit: one helper that checks an op on a device, and a table of op cases.

:func:`check_op` runs one :class:`OpCase` on one device and checks

1. the forward result against a reference: PyTorch on the same inputs when it is
   installed, else the case's numpy reference, else (for a non-cpu device) corenn's
   own ``cpu`` kernels -- so a plugin author needs neither torch nor numpy references;
2. the backward in float64 against central finite differences
   (:func:`corenn.autograd.gradcheck`), and a vector-Jacobian product with random
   ``grad_outputs`` against the reference's (which also runs backward on empty tensors,
   where a Jacobian has no entries to compare).

A plugin that overrides kernels checks them all in one line::

    >>> from corenn.testing.opcheck import run_conformance
    >>> run_conformance(device="cpu", ops=["add", "matmul"])   # raises ConformanceError on failure
    [...]

or as pytest tests, one per (case, device)::

    from corenn.testing.opcheck import check_op, opcheck_params

    @pytest.mark.parametrize("case, device", opcheck_params(devices=["cuda"]))
    def test_ops(case, device):
        check_op(case, device)

Each case's function takes the library first (``corenn`` or ``torch``) so one
expression serves both: ``OpCase("exp", lambda lib, x: lib.exp(x), [Float((2, 3))])``.
"""
from __future__ import annotations

import dataclasses
import itertools
import sys
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Float", "Index", "Mask", "OpCase", "CASES", "ConformanceError", "available_devices", "cases",
           "check_op", "opcheck_params", "run_conformance", "functional"]


# ---------------------------------------------------------------------------------------------------------
# Input specifications
# ---------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Float:
    """A floating input of ``shape`` with values in ``[low, high]`` (differentiable unless ``grad=False``).

    ``away_from_zero`` draws magnitudes in ``[low, high]`` with random signs, keeping
    values off the kink of ops like ``abs`` and ``relu`` where finite differences lie.
    ``distinct`` makes all values distinct and well separated (for max/sort-like ops).
    """

    shape: tuple = ()
    low: float = -2.0
    high: float = 2.0
    away_from_zero: bool = False
    distinct: bool = False
    grad: bool = True

    def make(self, rng: np.random.Generator, dtype) -> np.ndarray:
        size = int(np.prod(self.shape, dtype=np.int64))
        if self.distinct:
            values = rng.permutation(size).astype(np.float64) * (self.high - self.low) / max(size, 1) + self.low
        else:
            values = rng.uniform(self.low, self.high, size)
        if self.away_from_zero:
            values = np.abs(values) * rng.choice([-1.0, 1.0], size)
        return values.reshape(self.shape).astype(dtype)


@dataclasses.dataclass(frozen=True)
class Index:
    """An int64 index input of ``shape`` with values in ``[0, high)`` (``unique``: no repeats)."""

    shape: tuple = ()
    high: int = 1
    unique: bool = False

    def make(self, rng: np.random.Generator, dtype=None) -> np.ndarray:
        size = int(np.prod(self.shape, dtype=np.int64))
        if self.unique:  # no repeats along the last dimension (what scatter needs to be deterministic)
            rows = int(np.prod(self.shape[:-1], dtype=np.int64))
            picked = [rng.permutation(self.high)[:self.shape[-1]] for _ in range(rows)]
            return np.array(picked, dtype=np.int64).reshape(self.shape)
        return rng.integers(0, self.high, size).reshape(self.shape).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Mask:
    """A bool input of ``shape`` (about half true)."""

    shape: tuple = ()

    def make(self, rng: np.random.Generator, dtype=None) -> np.ndarray:
        return rng.random(self.shape) < 0.5


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One way of calling one op: ``fn(lib, *inputs)`` with inputs built from ``args``.

    ``op``           the op's public name (what ``run_conformance(ops=[...])`` selects on)
    ``fn``           ``fn(lib, *tensors)`` for ``lib`` in (corenn, torch); returns a tensor or a tuple
    ``args``         :class:`Float` / :class:`Index` / :class:`Mask` specs, one per input tensor
    ``ref``          optional numpy reference ``ref(*arrays)`` -> array or tuple of arrays
    ``grad``         whether the op is differentiable (gradcheck the float inputs)
    ``broadcast``    the float inputs may take any mutually broadcastable shapes (for drawn shapes)
    ``rtol, atol``   forward tolerance in float32 (float64 uses 1e-7 / 1e-9 unless ``rtol64`` given)
    ``torch``        False when PyTorch has no equivalent expression (no oracle for this case)
    """

    op: str
    fn: Callable
    args: Sequence[Any]
    ref: Callable | None = None
    grad: bool = True
    broadcast: bool = False
    rtol: float = 1e-5
    atol: float = 1e-6
    rtol64: float = 1e-7
    atol64: float = 1e-9
    torch: bool = True
    label: str = ""

    @property
    def id(self) -> str:
        shapes = ",".join("x".join(map(str, a.shape)) or "0d" for a in self.args)
        return f"{self.op}{'-' + self.label if self.label else ''}[{shapes}]"

    def with_shapes(self, shapes: Sequence[tuple]) -> "OpCase":
        """The same case with its float inputs' shapes replaced (for drawn shapes)."""
        floats = iter(shapes)
        args = [dataclasses.replace(a, shape=tuple(next(floats))) if isinstance(a, Float) else a for a in self.args]
        return dataclasses.replace(self, args=args)


class ConformanceError(AssertionError):
    """An op disagreed with its reference or with finite differences; the message names case and device."""


def functional(lib):
    """``torch.nn.functional`` for torch; for corenn its ``nn.functional`` or, before that exists, the core ops."""
    import importlib
    try:
        return importlib.import_module(f"{lib.__name__}.nn.functional")
    except ImportError:  # corenn without its nn package: the core ops behind nn.functional
        return lib


# ---------------------------------------------------------------------------------------------------------
# The one checking helper
# ---------------------------------------------------------------------------------------------------------

def _torch_or_none():
    # corenn never imports torch itself: PyTorch is the reference only when the calling program
    # (a test suite with torch installed) has imported it already.
    return sys.modules.get("torch")


def _outputs(result) -> list:
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def _to_corenn(arrays, specs, device, requires_grad):
    import corenn
    tensors = []
    for array, spec in zip(arrays, specs):
        t = corenn.tensor(array, device=device)
        if requires_grad and isinstance(spec, Float) and spec.grad:
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def _to_torch(torch, arrays, specs, requires_grad):
    tensors = []
    for array, spec in zip(arrays, specs):
        t = torch.from_numpy(np.array(array))
        if requires_grad and isinstance(spec, Float) and spec.grad:
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def _host(value) -> np.ndarray:
    if hasattr(value, "_host"):
        return np.asarray(value.detach()._host())
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().numpy()
    return np.asarray(value)


def _compare(name, got, expected, rtol, atol, what):
    got, expected = _host(got), _host(expected)
    if got.shape != expected.shape:
        raise ConformanceError(f"{name}: {what} has shape {list(got.shape)}, reference {list(expected.shape)}")
    if got.dtype.kind != expected.dtype.kind or (got.dtype.kind == "f" and got.dtype != expected.dtype):
        raise ConformanceError(f"{name}: {what} has dtype {got.dtype}, reference {expected.dtype}")
    if got.dtype.kind in "biu":
        ok = np.array_equal(got, expected)
    else:
        ok = np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    if not ok:
        raise ConformanceError(f"{name}: {what} differs from the reference\ngot:\n{got}\nexpected:\n{expected}")


def check_op(case: OpCase, device: str = "cpu", *, reference: str = "auto", seed: int = 0,
             dtypes=("float32", "float64"), check_grad: bool = True, finite_differences: bool = True) -> str:
    """Check ``case`` on ``device``: forward vs a reference per dtype, backward vs float64 finite differences.

    ``reference`` is ``"torch"``, ``"numpy"``, ``"cpu"`` (corenn's cpu kernels), ``"none"``
    or ``"auto"`` (torch if the caller has imported it and the case has an oracle, else numpy if the case
    has a reference, else cpu when ``device`` is not cpu); a case without the requested
    reference falls back to ``"none"`` (gradients only). Returns the reference used;
    raises :class:`ConformanceError` naming the case, device and what differed.
    ``check_grad=False`` skips every gradient check; ``finite_differences=False`` keeps the
    vector-Jacobian product against the reference but skips the (slower) gradcheck.

    Example::

        >>> check_op(OpCase("exp", lambda lib, x: lib.exp(x), [Float((3,))], ref=np.exp))
        'torch'
    """
    import corenn
    torch = _torch_or_none() if reference in ("auto", "torch") else None
    if reference == "torch" and torch is None:
        raise ConformanceError("reference='torch' but torch is not imported (import torch before checking)")
    if reference == "auto":
        if torch is not None and case.torch:
            reference = "torch"
        elif case.ref is not None:
            reference = "numpy"
        elif str(device) != "cpu":
            reference = "cpu"
        else:
            reference = "none"
    if (reference == "numpy" and case.ref is None) or (reference == "torch" and not case.torch):
        reference = "none"  # this case has no such reference: only its gradients are checked
    name = f"{case.id} on {device}"
    rng = np.random.default_rng(seed)
    base = [spec.make(rng, np.float64) for spec in case.args]

    for dtype_name in dtypes:
        arrays = [a.astype(dtype_name) if isinstance(s, Float) else a for a, s in zip(base, case.args)]
        rtol, atol = (case.rtol64, case.atol64) if dtype_name == "float64" else (case.rtol, case.atol)
        inputs = _to_corenn(arrays, case.args, device, requires_grad=False)
        got = _outputs(case.fn(corenn, *inputs))
        if reference == "torch":
            expected = _outputs(case.fn(torch, *_to_torch(torch, arrays, case.args, requires_grad=False)))
        elif reference == "numpy":
            expected = _outputs(case.ref(*arrays))
        elif reference == "cpu":
            expected = _outputs(case.fn(corenn, *_to_corenn(arrays, case.args, "cpu", requires_grad=False)))
        else:
            expected = None
        for got_t in got:
            if getattr(got_t, "device", None) is not None and str(got_t.device) != str(corenn.device(device)):
                raise ConformanceError(f"{name}: output is on {got_t.device}, expected {device}")
        if expected is not None:
            if len(got) != len(expected):
                raise ConformanceError(f"{name}: {len(got)} outputs, reference has {len(expected)}")
            for i, (g, e) in enumerate(zip(got, expected)):
                _compare(name, g, e, rtol, atol, f"{dtype_name} output {i}")

    if not (case.grad and check_grad):
        return reference
    float_inputs = [i for i, s in enumerate(case.args) if isinstance(s, Float) and s.grad]
    inputs = _to_corenn(base, case.args, device, requires_grad=True)
    outputs = [o for o in _outputs(case.fn(corenn, *inputs)) if o.requires_grad]
    if not outputs:
        raise ConformanceError(f"{name}: the op is marked differentiable but no output requires grad")
    # A vector-Jacobian product with random weights: runs backward even on empty tensors.
    weights = [rng.standard_normal(tuple(o.shape)) for o in outputs]
    grads = corenn.autograd.grad(outputs, [inputs[i] for i in float_inputs],
                                 [corenn.tensor(w, device=device) for w in weights], allow_unused=True)
    for i, g in zip(float_inputs, grads):
        if g is not None and tuple(g.shape) != tuple(inputs[i].shape):
            raise ConformanceError(f"{name}: gradient of input {i} has shape {list(g.shape)}, "
                                   f"input {list(inputs[i].shape)}")
    if reference == "torch":
        t_inputs = _to_torch(torch, base, case.args, requires_grad=True)
        t_outputs = [o for o in _outputs(case.fn(torch, *t_inputs)) if o.requires_grad]
        t_grads = torch.autograd.grad(t_outputs, [t_inputs[i] for i in float_inputs],
                                      [torch.from_numpy(w) for w in weights], allow_unused=True)
        for i, g, tg in zip(float_inputs, grads, t_grads):
            if tg is None:
                tg = torch.zeros_like(t_inputs[i])
            if g is None:
                g = np.zeros(base[i].shape)
            _compare(name, g, tg, 1e-6, 1e-8, f"gradient of input {i}")
    elif reference == "cpu":
        c_inputs = _to_corenn(base, case.args, "cpu", requires_grad=True)
        c_outputs = [o for o in _outputs(case.fn(corenn, *c_inputs)) if o.requires_grad]
        c_grads = corenn.autograd.grad(c_outputs, [c_inputs[i] for i in float_inputs],
                                       [corenn.tensor(w) for w in weights], allow_unused=True)
        for i, g, cg in zip(float_inputs, grads, c_grads):
            if (g is None) != (cg is None):
                raise ConformanceError(f"{name}: gradient of input {i} is None on one device only")
            if g is not None:
                _compare(name, g, cg, 1e-6, 1e-8, f"gradient of input {i}")

    if not finite_differences:
        return reference

    def func(*tensors):
        return tuple(o for o in _outputs(case.fn(corenn, *tensors)))

    try:
        corenn.autograd.gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)
    except corenn.autograd.GradcheckError as error:
        raise ConformanceError(f"{name}: gradcheck failed: {error}") from None
    return reference


def available_devices() -> list[str]:
    """Every device corenn can use here (``['cpu', 'cuda:0', ...]``), from the registered backends."""
    import corenn
    return corenn.dispatch.available_devices()


def cases(ops: Sequence[str] | None = None) -> list[OpCase]:
    """The cases of the table, all or those of the named ops (unknown names raise ValueError)."""
    if ops is None:
        return list(CASES)
    known = {c.op for c in CASES}
    unknown = sorted(set(ops) - known)
    if unknown:
        raise ValueError(f"no conformance cases for {unknown}; known ops: {sorted(known)}")
    return [c for c in CASES if c.op in set(ops)]


def opcheck_params(ops: Sequence[str] | None = None, devices: Sequence[str] | None = None) -> list:
    """``pytest.param(case, device)`` for every case and device, with readable ids."""
    import pytest
    devices = available_devices() if devices is None else list(devices)
    return [pytest.param(case, device, id=f"{case.id}-{device}") for device in devices for case in cases(ops)]


def run_conformance(device: str = "cpu", ops: Sequence[str] | None = None, *, reference: str = "auto",
                    raise_on_failure: bool = True) -> list[tuple[str, str]]:
    """Check every case (or those of ``ops``) on ``device``; returns ``[(case id, outcome), ...]``.

    ``outcome`` is the reference used, or ``"FAIL: ..."``. With ``raise_on_failure`` a
    :class:`ConformanceError` lists every failing case.
    """
    results = []
    failures = []
    for case in cases(ops):
        try:
            results.append((case.id, check_op(case, device, reference=reference)))
        except Exception as error:  # report every failing case, not only the first
            message = f"FAIL: {type(error).__name__}: {error}"
            results.append((case.id, message))
            failures.append(f"{case.id}: {message}")
    if failures and raise_on_failure:
        raise ConformanceError(f"{len(failures)} of {len(results)} cases failed on {device}:\n" + "\n".join(failures))
    return results


# ---------------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------------

def _unary(op, ref=None, *, low=-2.0, high=2.0, away=False, grad=True, fn=None, **kw):
    fn = fn or (lambda lib, x: getattr(lib, op)(x))
    return OpCase(op, fn, [Float((2, 3), low, high, away_from_zero=away)], ref=ref, grad=grad, broadcast=True, **kw)


def _binary(op, ref=None, *, low=-2.0, high=2.0, other=(-2.0, 2.0), away=False, fn=None, **kw):
    fn = fn or (lambda lib, a, b: getattr(lib, op)(a, b))
    return OpCase(op, fn, [Float((2, 3), low, high), Float((3,), *other, away_from_zero=away)], ref=ref,
                  broadcast=True, **kw)


def _erf(x):
    import math
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


_ELEMENTWISE = [
    _binary("add", np.add), _binary("sub", np.subtract), _binary("mul", np.multiply),
    _binary("div", np.divide, other=(0.5, 2.0), away=True),
    _binary("maximum", np.maximum), _binary("minimum", np.minimum),
    _binary("pow", np.power, low=0.5, high=2.0),
    _binary("remainder", np.remainder, other=(0.7, 1.9), away=True, rtol=1e-4),
    _binary("fmod", np.fmod, other=(0.7, 1.9), away=True, rtol=1e-4),
    OpCase("add", lambda lib, a, b: lib.add(a, b, alpha=2.5), [Float((2, 3)), Float((2, 1))], label="alpha",
           broadcast=True),
    OpCase("sub", lambda lib, a, b: lib.sub(a, b, alpha=-0.5), [Float((1, 3)), Float((2, 1))], label="alpha",
           broadcast=True),
    OpCase("add", lambda lib, a: a + 1.5, [Float((2, 3))], label="scalar", broadcast=True),
    OpCase("sub", lambda lib, a: 1.5 - a, [Float((2, 3))], label="rsub", broadcast=True),
    OpCase("mul", lambda lib, a: 3 * a, [Float((2, 3))], label="rmul", broadcast=True),
    OpCase("div", lambda lib, a: 2 / a, [Float((2, 3), 0.5, 2.0, away_from_zero=True)], label="rdiv",
           broadcast=True),
    OpCase("pow", lambda lib, a: a ** 3, [Float((2, 3))], label="int-exponent", broadcast=True),
    OpCase("pow", lambda lib, a: a ** 0.5, [Float((2, 3), 0.5, 2.0)], label="sqrt-exponent", broadcast=True),
    OpCase("pow", lambda lib, a: 2.0 ** a, [Float((2, 3))], label="rpow", broadcast=True),
    _unary("neg", np.negative), _unary("exp", np.exp), _unary("expm1", np.expm1),
    _unary("log", np.log, low=0.2, high=3.0), _unary("log1p", np.log1p, low=-0.5, high=3.0),
    _unary("sqrt", np.sqrt, low=0.2, high=3.0), _unary("rsqrt", lambda x: 1 / np.sqrt(x), low=0.2, high=3.0),
    _unary("abs", np.abs, away=True, low=0.1), _unary("square", np.square),
    _unary("sin", np.sin), _unary("cos", np.cos), _unary("tan", np.tan, low=-1.2, high=1.2),
    _unary("tanh", np.tanh), _unary("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    _unary("relu", lambda x: np.maximum(x, 0), away=True, low=0.1),
    _unary("erf", _erf), _unary("reciprocal", np.reciprocal, away=True, low=0.3),
    _unary("sign", np.sign, away=True, low=0.1),
    _unary("gelu", fn=lambda lib, x: functional(lib).gelu(x)),
    _unary("gelu", fn=lambda lib, x: functional(lib).gelu(x, approximate="tanh"), label="tanh"),
    _unary("silu", lambda x: x / (1 + np.exp(-x)), fn=lambda lib, x: functional(lib).silu(x)),
    _unary("softplus", lambda x: np.log1p(np.exp(x)), fn=lambda lib, x: functional(lib).softplus(x)),
    _unary("softplus", fn=lambda lib, x: functional(lib).softplus(x, beta=2.0, threshold=1.0), label="beta",
           low=-1.0, high=1.0),
    _unary("floor", np.floor, low=-3, high=3), _unary("ceil", np.ceil, low=-3, high=3),
    _unary("round", np.round, low=-3, high=3), _unary("trunc", np.trunc, low=-3, high=3),
    _unary("clamp", lambda x: np.clip(x, -0.5, 0.7), fn=lambda lib, x: lib.clamp(x, -0.5, 0.7)),
    _unary("clamp", lambda x: np.maximum(x, -0.5), fn=lambda lib, x: lib.clamp(x, min=-0.5), label="min"),
    OpCase("clamp", lambda lib, x, lo, hi: lib.clamp(x, lo, hi), [Float((2, 3)), Float((3,), -2, -0.3),
                                                                   Float((2, 1), 0.3, 2)], label="tensors"),
    OpCase("where", lambda lib, c, a, b: lib.where(c, a, b), [Mask((2, 3)), Float((2, 3)), Float((3,))],
           ref=np.where),
    OpCase("where", lambda lib, c, a: lib.where(c, a, 0.0), [Mask((2, 3)), Float((2, 3))], label="scalar"),
    OpCase("masked_fill", lambda lib, x, m: x.masked_fill(m, -1.5), [Float((2, 3)), Mask((2, 3))]),
    OpCase("masked_fill", lambda lib, x, m: x.masked_fill(m, -1.5), [Float((2, 3)), Mask((3,))], label="bcast"),
    OpCase("lerp", lambda lib, a, b: lib.lerp(a, b, 0.3), [Float((2, 3)), Float((2, 3))], broadcast=True),
    OpCase("addcmul", lambda lib, a, b, c: lib.addcmul(a, b, c, value=0.5),
           [Float((2, 3)), Float((3,)), Float((2, 1))], broadcast=True),
]

_R = dict(rtol=1e-4, atol=1e-5)
_REDUCE = [
    OpCase("sum", lambda lib, x: x.sum(), [Float((2, 3, 4))], ref=np.sum, **_R),
    OpCase("sum", lambda lib, x: x.sum(1), [Float((2, 3, 4))], label="dim", **_R),
    OpCase("sum", lambda lib, x: x.sum((0, 2), keepdim=True), [Float((2, 3, 4))], label="dims-keepdim", **_R),
    OpCase("sum", lambda lib, x: x.sum(), [Float((0, 3))], label="empty"),
    OpCase("sum", lambda lib, x: x.sum(), [Float(())], label="0d"),
    OpCase("mean", lambda lib, x: x.mean(), [Float((2, 3, 4))], **_R),
    OpCase("mean", lambda lib, x: x.mean(-1, keepdim=True), [Float((2, 3, 4))], label="dim", **_R),
    OpCase("prod", lambda lib, x: x.prod(), [Float((2, 3), 0.5, 1.5)], **_R),
    OpCase("prod", lambda lib, x: x.prod(1), [Float((3, 4), 0.5, 1.5)], label="dim", **_R),
    OpCase("max", lambda lib, x: x.max(), [Float((3, 4), distinct=True)]),
    OpCase("max", lambda lib, x: tuple(x.max(1)), [Float((3, 4), distinct=True)], label="dim"),
    OpCase("max", lambda lib, x: tuple(x.max(0, keepdim=True)), [Float((3, 4), distinct=True)], label="keepdim"),
    OpCase("min", lambda lib, x: x.min(), [Float((3, 4), distinct=True)]),
    OpCase("min", lambda lib, x: tuple(lib.min(x, -1)), [Float((3, 4), distinct=True)], label="dim"),
    OpCase("amax", lambda lib, x: lib.amax(x, (0, 2)), [Float((2, 3, 4), distinct=True)]),
    OpCase("amin", lambda lib, x: lib.amin(x, 1, keepdim=True), [Float((2, 3, 4), distinct=True)]),
    OpCase("argmax", lambda lib, x: x.argmax(), [Float((3, 4), distinct=True)], grad=False),
    OpCase("argmax", lambda lib, x: x.argmax(1, keepdim=True), [Float((3, 4), distinct=True)], grad=False,
           label="dim"),
    OpCase("argmin", lambda lib, x: x.argmin(0), [Float((3, 4), distinct=True)], grad=False),
    OpCase("var", lambda lib, x: x.var(), [Float((3, 4))], **_R),
    OpCase("var", lambda lib, x: x.var(1, correction=0), [Float((3, 4))], label="correction0", **_R),
    OpCase("var", lambda lib, x: x.var(0, unbiased=True, keepdim=True), [Float((3, 4))], label="unbiased", **_R),
    OpCase("std", lambda lib, x: x.std(), [Float((3, 4))], **_R),
    OpCase("std", lambda lib, x: x.std(-1, correction=2), [Float((3, 5))], label="correction2", **_R),
    OpCase("logsumexp", lambda lib, x: lib.logsumexp(x, 1), [Float((3, 4))], **_R),
    OpCase("logsumexp", lambda lib, x: lib.logsumexp(x, (0, 1), keepdim=True), [Float((3, 4), -50, 50)],
           label="large", **_R),
    OpCase("norm", lambda lib, x: x.norm(), [Float((3, 4))], **_R),
    OpCase("norm", lambda lib, x: x.norm(dim=1), [Float((3, 4))], label="dim", **_R),
    OpCase("norm", lambda lib, x: lib.norm(x, p=1, dim=0), [Float((3, 4), away_from_zero=True, low=0.1)],
           label="p1", **_R),
    OpCase("all", lambda lib, m: m.all(), [Mask((3, 4))], grad=False),
    OpCase("all", lambda lib, m: m.all(1), [Mask((3, 4))], grad=False, label="dim"),
    OpCase("any", lambda lib, m: m.any(0), [Mask((3, 4))], grad=False),
    OpCase("cumsum", lambda lib, x: x.cumsum(1), [Float((3, 4))], **_R),
    OpCase("cumsum", lambda lib, x: lib.cumsum(x, 0), [Float((0, 2))], label="empty"),
    OpCase("cumprod", lambda lib, x: x.cumprod(1), [Float((3, 4), 0.5, 1.5)], **_R),
    OpCase("cumprod", lambda lib, x: x.cumprod(0), [Float((4,))], label="signs", **_R),
]

_MOVEMENT = [
    OpCase("reshape", lambda lib, x: x.reshape(3, -1), [Float((2, 3, 2))]),
    OpCase("view", lambda lib, x: x.view(6, 2), [Float((2, 3, 2))]),
    OpCase("flatten", lambda lib, x: x.flatten(1), [Float((2, 3, 2))]),
    OpCase("squeeze", lambda lib, x: x.squeeze(), [Float((2, 1, 3, 1))]),
    OpCase("squeeze", lambda lib, x: x.squeeze(1), [Float((2, 1, 3, 1))], label="dim"),
    OpCase("unsqueeze", lambda lib, x: x.unsqueeze(-1), [Float((2, 3))]),
    OpCase("transpose", lambda lib, x: x.transpose(0, 2), [Float((2, 3, 4))]),
    OpCase("permute", lambda lib, x: x.permute(2, 0, 1), [Float((2, 3, 4))]),
    OpCase("movedim", lambda lib, x: lib.movedim(x, 0, -1), [Float((2, 3, 4))]),
    OpCase("expand", lambda lib, x: x.expand(2, 3, 4), [Float((3, 1))]),
    OpCase("expand_as", lambda lib, x, y: x.expand_as(y), [Float((1, 4)), Float((3, 4), grad=False)]),
    OpCase("repeat", lambda lib, x: x.repeat(2, 1, 3), [Float((3, 2))]),
    OpCase("tile", lambda lib, x: lib.tile(x, (2, 2)), [Float((3, 2))]),
    OpCase("cat", lambda lib, a, b: lib.cat([a, b], 1), [Float((2, 3)), Float((2, 2))]),
    OpCase("cat", lambda lib, a, b: lib.cat([a, b]), [Float((0, 3)), Float((2, 3))], label="empty"),
    OpCase("stack", lambda lib, a, b: lib.stack([a, b], -1), [Float((2, 3)), Float((2, 3))]),
    OpCase("split", lambda lib, x: x.split(2, 1), [Float((2, 5))]),
    OpCase("split", lambda lib, x: x.split([1, 3], 0), [Float((4, 2))], label="sizes"),
    OpCase("chunk", lambda lib, x: x.chunk(3, 0), [Float((5, 2))]),
    OpCase("unbind", lambda lib, x: x.unbind(1), [Float((2, 3))]),
    OpCase("narrow", lambda lib, x: x.narrow(1, 1, 2), [Float((2, 4))]),
    OpCase("gather", lambda lib, x, i: lib.gather(x, 1, i), [Float((3, 4)), Index((3, 5), 4)]),
    OpCase("scatter", lambda lib, x, i, s: x.scatter(1, i, s), [Float((3, 4)), Index((3, 2), 4, unique=True),
                                                               Float((3, 2))]),
    OpCase("scatter_add", lambda lib, x, i, s: x.scatter_add(0, i, s), [Float((3, 4)), Index((5, 4), 3),
                                                                       Float((5, 4))]),
    OpCase("index_select", lambda lib, x, i: x.index_select(0, i), [Float((3, 4)), Index((5,), 3)]),
    OpCase("take_along_dim", lambda lib, x, i: lib.take_along_dim(x, i, 1), [Float((3, 4)), Index((3, 2), 4)]),
    OpCase("tril", lambda lib, x: x.tril(), [Float((3, 4))]),
    OpCase("triu", lambda lib, x: x.triu(1), [Float((2, 3, 4))]),
    OpCase("flip", lambda lib, x: lib.flip(x, (0, 2)), [Float((2, 3, 4))]),
    OpCase("roll", lambda lib, x: x.roll(1, 1), [Float((2, 3))]),
    OpCase("roll", lambda lib, x: x.roll((1, -1), (0, 1)), [Float((2, 3))], label="dims"),
    OpCase("roll", lambda lib, x: x.roll(2), [Float((2, 3))], label="flat"),
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (1, 2)), [Float((2, 3))]),
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (1, 0, 0, 2), value=0.5), [Float((2, 3))], label="2d"),
    OpCase("getitem", lambda lib, x: x[1:, ::2], [Float((3, 5))], label="slice"),
    OpCase("getitem", lambda lib, x: x[1], [Float((3, 5))], label="int"),
    OpCase("getitem", lambda lib, x: x[..., None, -1], [Float((3, 5))], label="ellipsis-none"),
    OpCase("getitem", lambda lib, x, m: x[m], [Float((3, 5)), Mask((3, 5))], label="mask"),
    OpCase("getitem", lambda lib, x, i: x[i], [Float((3, 5)), Index((6,), 3)], label="repeated-index"),
    OpCase("getitem", lambda lib, x, i, j: x[i, j], [Float((3, 5)), Index((4,), 3), Index((4,), 5)],
           label="advanced"),
    OpCase("getitem", lambda lib, x, i: x[:, i], [Float((3, 5)), Index((2, 2), 5)], label="advanced-slice"),
    OpCase("setitem", lambda lib, x, v: _setitem(x, (slice(None), 1), v), [Float((3, 4)), Float((3,))]),
    OpCase("setitem", lambda lib, x, m: _setitem(x, m, 0.25), [Float((3, 4)), Mask((3, 4))], label="mask"),
    OpCase("setitem", lambda lib, x, i, v: _setitem(x, i, v), [Float((3, 4)), Index((2,), 3, unique=True),
                                                               Float((4,))], label="index"),
]


def _setitem(x, index, value):
    y = x.clone()
    y[index] = value
    return y


_L = dict(rtol=1e-4, atol=1e-5)
_LINALG = [
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((4,)), Float((4,))], label="1d-1d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((3, 4)), Float((4,))], label="2d-1d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((4,)), Float((4, 2))], label="1d-2d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((3, 4)), Float((4, 2))], label="2d-2d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((2, 3, 4)), Float((2, 4, 2))], label="batched", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((2, 1, 3, 4)), Float((3, 4, 2))], label="broadcast", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((2, 3, 4)), Float((4,))], label="3d-1d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((4,)), Float((2, 4, 3))], label="1d-3d", **_L),
    OpCase("matmul", lambda lib, a, b: a @ b, [Float((2, 3, 4)), Float((4, 2))], label="3d-2d", **_L),
    OpCase("matmul", lambda lib, a, b: lib.matmul(a, b), [Float((0, 4)), Float((4, 2))], label="empty", **_L),
    OpCase("bmm", lambda lib, a, b: lib.bmm(a, b), [Float((2, 3, 4)), Float((2, 4, 5))], **_L),
    OpCase("outer", lambda lib, a, b: lib.outer(a, b), [Float((3,)), Float((4,))], **_L),
    OpCase("einsum", lambda lib, a, b: lib.einsum("ij,jk->ik", a, b), [Float((2, 3)), Float((3, 4))], **_L),
    OpCase("einsum", lambda lib, a, b: lib.einsum("bij,bjk->bik", a, b), [Float((2, 2, 3)), Float((2, 3, 4))],
           label="batched", **_L),
    OpCase("einsum", lambda lib, a: lib.einsum("ii->i", a), [Float((3, 3))], label="diag", **_L),
    OpCase("einsum", lambda lib, a, b: lib.einsum("...i,...i->...", a, b), [Float((2, 3, 4)), Float((3, 4))],
           label="ellipsis", **_L),
    OpCase("einsum", lambda lib, a: lib.einsum("ij->", a), [Float((2, 3))], label="sum", **_L),
]

_NN = [
    OpCase("softmax", lambda lib, x: lib.softmax(x, -1), [Float((3, 4))], **_R),
    OpCase("softmax", lambda lib, x: lib.softmax(x, 0), [Float((3, 4), -1000, 1000, distinct=True)],
           label="large", **_R),
    OpCase("log_softmax", lambda lib, x: lib.log_softmax(x, 1), [Float((3, 4))], **_R),
    OpCase("log_softmax", lambda lib, x: lib.log_softmax(x, -1), [Float((2, 3), -1000, 1000, distinct=True)],
           label="large", **_R),
]

#: Every case, in table order.
CASES: list[OpCase] = _ELEMENTWISE + _REDUCE + _MOVEMENT + _LINALG + _NN
