"""The op-conformance kit: one helper that checks an op on a device, and a table of op cases.

:func:`check_op` runs one :class:`OpCase` on one device and checks

1. the forward result (values, dtypes, shapes, device) against a reference: PyTorch on
   the same inputs wherever it is installed (imported at the first check, never by
   ``import corenn``), else the case's numpy reference;
2. the forward result and a vector-Jacobian product against **the core's own kernels on
   the host** (the priority-0 kernels corenn registers, run on ``cpu`` copies of the
   same inputs) whenever a kernel that runs is not the core's own: any device other
   than ``cpu``, or a plugin override on ``cpu``. This needs neither torch nor numpy
   references, so a wrong forward can't pass where torch is absent;
3. the backward in float64 against central finite differences
   (:func:`corenn.autograd.gradcheck`), and a vector-Jacobian product with random
   ``grad_outputs`` against PyTorch's where it is the reference (which also runs
   backward on empty tensors, where a Jacobian has no entries to compare).

Every input, ``grad_output`` and perturbation is made on the device under test (a
host array moved there through the tensor API, i.e. the backend's ``to_device``);
results come back only through the backend's ``to_host``. So the kit runs on a device
whose arrays are not numpy arrays (cupy, or the strict test device in corenn's tests).

A plugin checks its kernels, or its whole device, in one line::

    >>> from corenn.testing.opcheck import run_conformance
    >>> run_conformance(device="cpu", ops=["add", "conv"])   # raises ConformanceError on failure
    [('add[2x3,3]', 'torch'), ...]

``ops`` selects cases by public name (``"conv2d"``) or by kernel name (``"conv"``).
A failure names the case, device, output, the largest absolute and relative errors
and the reference. As pytest tests, one per (case, device)::

    from corenn.testing.opcheck import check_op, opcheck_params

    @pytest.mark.parametrize("case, device", opcheck_params(devices=["cuda"]))
    def test_ops(case, device):
        check_op(case, device)

Each case's function takes the library first (``corenn`` or ``torch``) so one
expression serves both: ``OpCase("exp", lambda lib, x: lib.exp(x), [Float((2, 3))])``.
Every kernel the core registers has at least one case (:func:`uncovered_kernels` says
which do not; corenn's tests keep it empty), except those in :data:`EXEMPT`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import math
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Float", "Index", "Mask", "Special", "OpCase", "CASES", "EXEMPT", "ConformanceError",
           "available_devices", "cases", "check_op", "opcheck_params", "run_conformance",
           "uncovered_kernels", "functional"]


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
class Special:
    """A floating input of ``shape`` mixing ordinary values with 0, -0, +-inf and nan (never differentiated)."""

    shape: tuple = ()
    grad = False

    def make(self, rng: np.random.Generator, dtype) -> np.ndarray:
        pool = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan])
        return rng.choice(pool, self.shape).astype(dtype)


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


_FLOATING = (Float, Special)


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One way of calling one op: ``fn(lib, *inputs)`` with inputs built from ``args``.

    ``op``           the op's public name (what ``run_conformance(ops=[...])`` selects on)
    ``fn``           ``fn(lib, *tensors)`` for ``lib`` in (corenn, torch); returns a tensor or a tuple
    ``args``         :class:`Float` / :class:`Special` / :class:`Index` / :class:`Mask` specs, one per input
    ``ref``          optional numpy reference ``ref(*arrays)`` -> array or tuple of arrays
    ``grad``         whether the op is differentiable (gradcheck the float inputs)
    ``broadcast``    the float inputs may take any mutually broadcastable shapes (for drawn shapes)
    ``rtol, atol``   forward tolerance in float32 (float64 uses 1e-7 / 1e-9 unless ``rtol64`` given)
    ``torch``        False when PyTorch has no equivalent expression (no oracle for this case)
    ``kernels``      the registry's names of the kernels this case is for, when they differ from
                     ``op`` (``F.conv2d`` runs the kernel ``"conv"``); the meta-test checks that the
                     case really runs them
    ``gradcheck``    False where finite differences can't see the derivative (a round trip through a
                     narrower dtype); the vector-Jacobian products against the references still run
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
    kernels: tuple = ()
    gradcheck: bool = True

    @property
    def id(self) -> str:
        shapes = ",".join("x".join(map(str, a.shape)) or "0d" for a in self.args)
        return f"{self.op}{'-' + self.label if self.label else ''}[{shapes}]"

    @property
    def kernel_names(self) -> tuple:
        """The kernels this case is for: ``kernels``, or ``(op,)``."""
        return tuple(self.kernels) or (self.op,)

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
# The core's own kernels, as a reference on the host
# ---------------------------------------------------------------------------------------------------------

def _core() -> dict:
    """``{op: kernel}`` of the core's own kernels (those it registers at priority 0): the host reference."""
    from corenn.kernels import core_kernels
    return dict(core_kernels())


@contextlib.contextmanager
def _core_kernels_on_cpu():
    """Within the block, ops on ``cpu`` run the core's kernels (plugin overrides are set aside)."""
    from corenn.dispatch import kernels
    table = dict(kernels.table("cpu"))  # ops only plugins provide keep their kernels
    table.update(_core())
    resolved = kernels._resolved  # the dispatcher's per-device tables (corenn.autograd.node reads them)
    previous = resolved.get("cpu")
    resolved["cpu"] = table
    try:
        yield
    finally:
        if resolved.get("cpu") is table:  # a registration in the block has rebuilt the tables: leave them
            if previous is None:
                del resolved["cpu"]
            else:
                resolved["cpu"] = previous


class _Dispatched:
    """An op observer that records which kernels (by op name) the dispatcher ran."""

    def __init__(self):
        self.ops: set = set()

    def op_start(self, op_name, device, arrays):
        self.ops.add(op_name)

    def op_end(self, op_name, device, out):
        pass


@contextlib.contextmanager
def _recording():
    from corenn import plugins
    seen = _Dispatched()
    with plugins.observe_ops(seen):
        yield seen


def _runs_other_kernels(used: set, device) -> bool:
    """Whether any kernel of ``used`` that runs on ``device`` is not the core's own kernel on cpu."""
    if device.type != "cpu":
        return True
    from corenn.dispatch import kernels
    core, table = _core(), kernels.table("cpu")
    return any(op in core and table.get(op) is not core[op] for op in used)


# ---------------------------------------------------------------------------------------------------------
# The one checking helper
# ---------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _torch_or_none():
    # PyTorch is the reference wherever it is installed, whether or not the caller has imported
    # it, so a check's result does not depend on which tests ran before it. Imported here, at
    # the first check, because ``import corenn`` must not pull it in.
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _outputs(result) -> list:
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


def _differentiable(spec) -> bool:
    return isinstance(spec, Float) and spec.grad


def _to_corenn(arrays, specs, device, requires_grad):
    """The host ``arrays`` as tensors on ``device``: ``corenn.tensor`` moves them with the backend's ``to_device``."""
    import corenn
    tensors = []
    for array, spec in zip(arrays, specs):
        t = corenn.tensor(array, device=device)
        if requires_grad and _differentiable(spec):
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def _to_torch(torch, arrays, specs, requires_grad):
    tensors = []
    for array, spec in zip(arrays, specs):
        t = torch.from_numpy(np.array(array))
        if requires_grad and _differentiable(spec):
            t.requires_grad_(True)
        tensors.append(t)
    return tensors


def _host(value) -> np.ndarray:
    """A numpy array of ``value``: a corenn tensor through its backend's ``to_host``, never implicitly."""
    from corenn.dispatch import get_backend
    from corenn.tensor.tensor import Tensor
    if isinstance(value, Tensor):
        value = value.detach()
        if value.device.type == "cpu":
            return value._data
        return np.asarray(get_backend(value.device.type).to_host(value._data))
    if hasattr(value, "detach"):  # a torch tensor (force: some of its zero gradients are ZeroTensors)
        return value.detach().numpy(force=True)
    return np.asarray(value)


_REFERENCE_NAMES = {"torch": "PyTorch", "numpy": "the case's numpy reference", "core": "the core kernels on cpu"}


def _compare(name, got, expected, rtol, atol, what, against):
    """Raise ConformanceError if ``got`` and ``expected`` differ in shape, dtype or (beyond tolerance) values."""
    got, expected = _host(got), _host(expected)
    reference = f"the reference ({_REFERENCE_NAMES.get(against, against)})"
    if got.shape != expected.shape:
        raise ConformanceError(f"{name}: {what} has shape {list(got.shape)}, {reference} {list(expected.shape)}")
    if got.dtype.kind != expected.dtype.kind or (got.dtype.kind == "f" and got.dtype != expected.dtype):
        raise ConformanceError(f"{name}: {what} has dtype {got.dtype}, {reference} {expected.dtype}")
    if got.dtype.kind in "biu":
        bad = got != expected
        if not bad.any():
            return
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        detail = f"first at index {first}: got {got[first]}, expected {expected[first]}"
    else:
        bad = ~np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        if not bad.any():
            return
        g, e = got.astype(np.float64), expected.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            abs_error = np.where(bad, np.abs(g - e), 0.0)
            abs_error = np.where(np.isnan(abs_error), np.inf, abs_error)  # nan on one side only
            rel_error = np.where(bad, abs_error / np.abs(e), 0.0)
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(abs_error), abs_error.shape))
        detail = (f"max abs error {abs_error.max():.3g}, max rel error {np.nanmax(rel_error):.3g} "
                  f"(rtol {rtol:g}, atol {atol:g}); worst at index {worst}: got {got[worst]!r}, "
                  f"expected {expected[worst]!r}")
    message = (f"{name}: {what} differs from {reference}: {int(bad.sum())} of {bad.size} elements; {detail}")
    if got.size <= 24:
        message += f"\ngot:\n{got}\nexpected:\n{expected}"
    raise ConformanceError(message)


def check_op(case: OpCase, device: str = "cpu", *, reference: str = "auto", seed: int = 0,
             dtypes=("float32", "float64"), check_grad: bool = True, finite_differences: bool = True) -> str:
    """Check ``case`` on ``device``: forward vs references per dtype, backward vs float64 finite differences.

    ``reference`` picks the external reference: ``"torch"``, ``"numpy"``, ``"core"`` (the
    core's kernels on the host, even where they are what runs; ``"cpu"`` is an alias),
    ``"none"``, or ``"auto"`` (torch if it is installed and the case has an oracle, else
    numpy if the case has a reference, else none). A case without the
    requested reference falls back to ``"none"``. Independently of that choice, whenever
    a kernel the case runs is not the core's own (any device but ``cpu``, or a plugin
    override on ``cpu``), forward outputs and a vector-Jacobian product are also compared
    with the core's kernels run on host copies of the same inputs.

    Returns the references compared, joined by ``+`` (``"torch"``, ``"numpy+core"``,
    ``"core"``, or ``"none"`` when only gradients were checked). Raises
    :class:`ConformanceError` naming the case, device, output, largest errors and reference.
    ``check_grad=False`` skips every gradient check; ``finite_differences=False`` keeps the
    vector-Jacobian products but skips the (slower) gradcheck.

    Example::

        >>> check_op(OpCase("exp", lambda lib, x: lib.exp(x), [Float((3,))], ref=np.exp))
        'torch'
    """
    import corenn
    from corenn import dispatch
    if reference == "cpu":
        reference = "core"
    if reference not in ("auto", "torch", "numpy", "core", "none"):
        raise ValueError(f"reference must be 'auto', 'torch', 'numpy', 'core' or 'none', got {reference!r}")
    torch = _torch_or_none() if reference in ("auto", "torch") else None
    if reference == "torch" and torch is None:
        raise ConformanceError("reference='torch' but PyTorch is not installed (pip install torch)")
    if reference == "auto":
        reference = "torch" if torch is not None and case.torch else "numpy" if case.ref is not None else "none"
    if (reference == "numpy" and case.ref is None) or (reference == "torch" and not case.torch):
        reference = "none"  # this case has no such reference: only its gradients are checked
    target = dispatch.resolve_device(device)
    name = f"{case.id} on {target}"
    rng = np.random.default_rng(seed)
    base = [spec.make(rng, np.float64) for spec in case.args]
    cpu = corenn.device("cpu")

    compare_core = None  # decided on the first forward, from the kernels that actually ran
    for dtype_name in dtypes:
        arrays = [a.astype(dtype_name) if isinstance(s, _FLOATING) else a for a, s in zip(base, case.args)]
        rtol, atol = (case.rtol64, case.atol64) if dtype_name == "float64" else (case.rtol, case.atol)
        inputs = _to_corenn(arrays, case.args, target, requires_grad=False)
        with _recording() as seen:
            got = _outputs(case.fn(corenn, *inputs))
        if compare_core is None:
            compare_core = reference == "core" or _runs_other_kernels(seen.ops | set(case.kernel_names), target)
        for i, got_t in enumerate(got):
            if getattr(got_t, "device", None) is not None and got_t.device != target:
                raise ConformanceError(f"{name}: output {i} is on {got_t.device}, expected {target}")
        references = []
        if reference == "torch":
            references.append(("torch", _outputs(case.fn(torch, *_to_torch(torch, arrays, case.args, False)))))
        elif reference == "numpy":
            references.append(("numpy", _outputs(case.ref(*arrays))))
        if compare_core:
            with _core_kernels_on_cpu():
                references.append(("core", _outputs(case.fn(corenn, *_to_corenn(arrays, case.args, cpu, False)))))
        for against, expected in references:
            if len(got) != len(expected):
                raise ConformanceError(f"{name}: {len(got)} outputs, the reference ({against}) has {len(expected)}")
            for i, (g, e) in enumerate(zip(got, expected)):
                _compare(name, g, e, rtol, atol, f"{dtype_name} output {i}", against)

    def outcome():
        used = [r for r in (reference,) if r in ("torch", "numpy")] + (["core"] if compare_core else [])
        return "+".join(used) or "none"

    if not (case.grad and check_grad):
        return outcome()
    float_inputs = [i for i, s in enumerate(case.args) if _differentiable(s)]
    inputs = _to_corenn(base, case.args, target, requires_grad=True)
    with _recording() as seen:  # recording a graph may take other kernels (setitem: index_put)
        all_outputs = _outputs(case.fn(corenn, *inputs))
    compare_core = compare_core or _runs_other_kernels(seen.ops, target)
    outputs = [o for o in all_outputs if o.requires_grad]
    if not outputs:
        raise ConformanceError(f"{name}: the op is marked differentiable but no output requires grad")
    # A vector-Jacobian product with random weights (made on the device): runs backward even on empty tensors.
    weights = [rng.standard_normal(tuple(o.shape)) for o in outputs]
    grads = corenn.autograd.grad(outputs, [inputs[i] for i in float_inputs],
                                 [corenn.tensor(w, device=target) for w in weights], allow_unused=True)
    for i, g in zip(float_inputs, grads):
        if g is not None and tuple(g.shape) != tuple(inputs[i].shape):
            raise ConformanceError(f"{name}: gradient of input {i} has shape {list(g.shape)}, "
                                   f"input {list(inputs[i].shape)}")
        if g is not None and g.device != target:
            raise ConformanceError(f"{name}: gradient of input {i} is on {g.device}, expected {target}")
    if reference == "torch":
        t_inputs = _to_torch(torch, base, case.args, requires_grad=True)
        t_all_outputs = _outputs(case.fn(torch, *t_inputs))
        for i, (o, to) in enumerate(zip(all_outputs, t_all_outputs)):
            _compare(name, o, to, case.rtol64, case.atol64, f"float64 output {i} (recording a graph)", "torch")
        t_outputs = [o for o in t_all_outputs if o.requires_grad]
        t_grads = torch.autograd.grad(t_outputs, [t_inputs[i] for i in float_inputs],
                                      [torch.from_numpy(w) for w in weights], allow_unused=True)
        for i, g, tg in zip(float_inputs, grads, t_grads):
            if tg is None:
                tg = torch.zeros_like(t_inputs[i])
            if g is None:
                g = np.zeros(base[i].shape)
            _compare(name, g, tg, 1e-6, 1e-8, f"gradient of input {i}", "torch")
    if compare_core:
        with _core_kernels_on_cpu():
            c_inputs = _to_corenn(base, case.args, cpu, requires_grad=True)
            c_all_outputs = _outputs(case.fn(corenn, *c_inputs))
            c_outputs = [o for o in c_all_outputs if o.requires_grad]
            c_grads = corenn.autograd.grad(c_outputs, [c_inputs[i] for i in float_inputs],
                                           [corenn.tensor(w) for w in weights], allow_unused=True)
        for i, (o, co) in enumerate(zip(all_outputs, c_all_outputs)):
            _compare(name, o, co, case.rtol64, case.atol64, f"float64 output {i} (recording a graph)", "core")
        for i, g, cg in zip(float_inputs, grads, c_grads):
            if (g is None) != (cg is None):
                raise ConformanceError(f"{name}: gradient of input {i} is None "
                                       f"{'here' if g is None else 'with the core kernels on cpu'} only")
            if g is not None:
                _compare(name, g, cg, 1e-6, 1e-8, f"gradient of input {i}", "core")

    if not (finite_differences and case.gradcheck):
        return outcome()

    def func(*tensors):
        return tuple(o for o in _outputs(case.fn(corenn, *tensors)))

    try:
        corenn.autograd.gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)
    except corenn.autograd.GradcheckError as error:
        raise ConformanceError(f"{name}: gradcheck failed (float64 central differences): {error}") from None
    return outcome()


def available_devices() -> list[str]:
    """Every device corenn can use here (``['cpu', 'cuda:0', ...]``), from the registered backends."""
    import corenn
    return corenn.dispatch.available_devices()


def cases(ops: Sequence[str] | None = None) -> list[OpCase]:
    """The cases of the table: all, or those of ``ops`` (public or kernel names; unknown names raise ValueError)."""
    if ops is None:
        return list(CASES)
    wanted = set(ops)
    known = {c.op for c in CASES} | {k for c in CASES for k in c.kernel_names}
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"no conformance cases for {unknown}; known ops: {sorted(known)}")
    return [c for c in CASES if c.op in wanted or wanted.intersection(c.kernel_names)]


def uncovered_kernels() -> list[str]:
    """The core kernels that no case claims (through ``op`` or ``kernels``) and :data:`EXEMPT` does not name."""
    claimed = {k for c in CASES for k in c.kernel_names}
    return sorted(op for op in _core() if op not in claimed and op not in EXEMPT)


def opcheck_params(ops: Sequence[str] | None = None, devices: Sequence[str] | None = None) -> list:
    """``pytest.param(case, device)`` for every case and device, with readable ids."""
    import pytest
    devices = available_devices() if devices is None else list(devices)
    return [pytest.param(case, device, id=f"{case.id}-{device}") for device in devices for case in cases(ops)]


def run_conformance(device: str = "cpu", ops: Sequence[str] | None = None, *, reference: str = "auto",
                    raise_on_failure: bool = True) -> list[tuple[str, str]]:
    """Check every case (or those of ``ops``) on ``device``; returns ``[(case id, outcome), ...]``.

    ``outcome`` is what :func:`check_op` returns (the references compared, e.g.
    ``"torch+core"``), or ``"FAIL: ..."`` with the reason. With ``raise_on_failure`` a
    :class:`ConformanceError` lists every failing case after running them all.

    Example::

        >>> run_conformance("cpu", ops=["gelu"])
        [('gelu[2x3]', 'torch'), ('gelu-tanh[2x3]', 'torch')]
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


#: Core kernels without a conformance case, each with the reason. Kept short: the meta-test in
#: corenn's tests fails for a core kernel that has neither a case nor an entry here.
EXEMPT: dict[str, str] = {}


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
    _unary("gelu", lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), fn=lambda lib, x: functional(lib).gelu(x)),
    _unary("gelu", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
           fn=lambda lib, x: functional(lib).gelu(x, approximate="tanh"), label="tanh"),
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
    OpCase("max", lambda lib, x: tuple(x.max(1)), [Float((3, 4), distinct=True)], label="dim", kernels=("max_dim",)),
    OpCase("max", lambda lib, x: tuple(x.max(0, keepdim=True)), [Float((3, 4), distinct=True)], label="keepdim",
           kernels=("max_dim",)),
    OpCase("min", lambda lib, x: x.min(), [Float((3, 4), distinct=True)]),
    OpCase("min", lambda lib, x: tuple(lib.min(x, -1)), [Float((3, 4), distinct=True)], label="dim",
           kernels=("max_dim",)),
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
    OpCase("norm", lambda lib, x: x.norm(), [Float((3, 4))], kernels=("norm2",), **_R),
    OpCase("norm", lambda lib, x: x.norm(dim=1), [Float((3, 4))], label="dim", kernels=("norm2",), **_R),
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
    OpCase("reshape", lambda lib, x: x.reshape(2, 3, 2), [Float((2, 3, 2))], label="same-shape", kernels=("alias",)),
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
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (1, 2)), [Float((2, 3))], kernels=("pad_axis",)),
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (1, 0, 0, 2), value=0.5), [Float((2, 3))], label="2d",
           kernels=("pad_axis",)),
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (1, 1, 2, 0), mode="reflect"), [Float((1, 3, 3))],
           label="reflect", kernels=("pad_axis",)),
    OpCase("pad", lambda lib, x: functional(lib).pad(x, (2, 1), mode="circular"), [Float((1, 2, 3))],
           label="circular", kernels=("pad_axis",)),
    OpCase("getitem", lambda lib, x: x[1:, ::2], [Float((3, 5))], label="slice"),
    OpCase("getitem", lambda lib, x: x[1], [Float((3, 5))], label="int"),
    OpCase("getitem", lambda lib, x: x[..., None, -1], [Float((3, 5))], label="ellipsis-none"),
    OpCase("getitem", lambda lib, x, m: x[m], [Float((3, 5)), Mask((3, 5))], label="mask"),
    OpCase("getitem", lambda lib, x, i: x[i], [Float((3, 5)), Index((6,), 3)], label="repeated-index"),
    OpCase("getitem", lambda lib, x, i, j: x[i, j], [Float((3, 5)), Index((4,), 3), Index((4,), 5)],
           label="advanced"),
    OpCase("getitem", lambda lib, x, i: x[:, i], [Float((3, 5)), Index((2, 2), 5)], label="advanced-slice"),
    OpCase("setitem", lambda lib, x, v: _setitem(x, (slice(None), 1), v), [Float((3, 4)), Float((3,))],
           kernels=("index_put",)),
    OpCase("setitem", lambda lib, x, m: _setitem(x, m, 0.25), [Float((3, 4)), Mask((3, 4))], label="mask",
           kernels=("index_put",)),
    OpCase("setitem", lambda lib, x, i, v: _setitem(x, i, v), [Float((3, 4)), Index((2,), 3, unique=True),
                                                               Float((4,))], label="index", kernels=("index_put",)),
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


def _compare_op(op, ref, args, label=""):
    return OpCase(op, lambda lib, a, b: getattr(lib, op)(a, b), args, ref=ref, grad=False, label=label)


_INTS = [Index((2, 3), 3), Index((3,), 3)]
_BITS = [Index((2, 3), 16), Index((3,), 16)]
_MASKS = [Mask((2, 3)), Mask((3,))]
_DIVISOR = Float((3,), 0.5, 2, away_from_zero=True)
_NONDIFFERENTIABLE = [
    OpCase("floor_divide", lambda lib, a, b: lib.floor_divide(a, b), [Float((2, 3), -3, 3), _DIVISOR],
           ref=np.floor_divide, grad=False),
    OpCase("floor_divide", lambda lib, a, b: lib.floor_divide(a - 4, b + 1), [Index((2, 3), 9), Index((3,), 4)],
           ref=lambda a, b: np.floor_divide(a - 4, b + 1), grad=False, label="int"),
    OpCase("div", lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"), [Float((2, 3), -3, 3), _DIVISOR],
           ref=lambda a, b: np.trunc(a / b), grad=False, label="trunc", kernels=("trunc_divide",)),
    OpCase("div", lambda lib, a, b: lib.div(a - 4, b + 1, rounding_mode="trunc"), [Index((2, 3), 9), Index((3,), 4)],
           ref=lambda a, b: np.sign(a - 4) * (np.abs(a - 4) // (b + 1)), grad=False, label="trunc-int",
           kernels=("trunc_divide",)),
    _compare_op("eq", np.equal, _INTS), _compare_op("ne", np.not_equal, _INTS),
    _compare_op("lt", np.less, _INTS), _compare_op("le", np.less_equal, _INTS),
    _compare_op("gt", np.greater, _INTS), _compare_op("ge", np.greater_equal, _INTS),
    _compare_op("lt", np.less, [Float((2, 3)), Float((3,))], label="float"),
    _compare_op("ge", np.greater_equal, [Float((2, 3)), Float((3,))], label="float"),
    OpCase("eq", lambda lib, a: a == 1, [Index((2, 3), 3)], ref=lambda a: a == 1, grad=False, label="scalar"),
    _compare_op("logical_and", np.logical_and, _MASKS), _compare_op("logical_or", np.logical_or, _MASKS),
    _compare_op("logical_xor", np.logical_xor, _MASKS),
    OpCase("logical_not", lambda lib, m: lib.logical_not(m), [Mask((2, 3))], ref=np.logical_not, grad=False),
    _compare_op("bitwise_and", np.bitwise_and, _BITS), _compare_op("bitwise_or", np.bitwise_or, _BITS),
    _compare_op("bitwise_xor", np.bitwise_xor, _BITS),
    _compare_op("bitwise_and", np.logical_and, _MASKS, label="bool"),
    _compare_op("bitwise_left_shift", np.left_shift, [Index((2, 3), 16), Index((3,), 4)]),
    _compare_op("bitwise_right_shift", np.right_shift, [Index((2, 3), 64), Index((3,), 4)]),
    OpCase("bitwise_not", lambda lib, a: lib.bitwise_not(a), [Index((2, 3), 16)], ref=np.invert, grad=False),
    OpCase("bitwise_not", lambda lib, m: lib.bitwise_not(m), [Mask((2, 3))], ref=np.invert, grad=False,
           label="bool"),
    OpCase("isnan", lambda lib, x: lib.isnan(x), [Special((2, 4))], ref=np.isnan, grad=False),
    OpCase("isinf", lambda lib, x: lib.isinf(x), [Special((2, 4))], ref=np.isinf, grad=False),
    OpCase("isfinite", lambda lib, x: lib.isfinite(x), [Special((2, 4))], ref=np.isfinite, grad=False),
    OpCase("signbit", lambda lib, x: lib.signbit(x), [Special((2, 4))], ref=np.signbit, grad=False),
]


def _activation(op, ref=None, *, low=-2.0, high=2.0, away=False, kernel=None, label="", **options):
    def fn(lib, x):
        return getattr(functional(lib), op)(x, **options)
    return OpCase(op, fn, [Float((2, 3), low, high, away_from_zero=away)], ref=ref, broadcast=True, label=label,
                  kernels=(kernel,) if kernel else ())


_ACTIVATION = [
    _unary("exp2", np.exp2), _unary("log2", np.log2, low=0.2, high=3.0), _unary("log10", np.log10, low=0.2, high=3.0),
    _activation("leaky_relu", lambda x: np.where(x > 0, x, 0.2 * x), away=True, low=0.1, negative_slope=0.2),
    _activation("elu", lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)), away=True, low=0.1, alpha=1.5),
    _activation("selu", away=True, low=0.1, kernel="elu"),
    _activation("celu", away=True, low=0.1, kernel="elu", alpha=0.5),
    _activation("hardtanh", lambda x: np.clip(x, -0.5, 0.7), min_val=-0.5, max_val=0.7),
    _activation("relu6", lambda x: np.clip(x, 0, 6), low=-8, high=8, kernel="hardtanh"),
    _activation("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, low=-4, high=4),
    _activation("hardsigmoid", lambda x: np.clip(x / 6 + 0.5, 0, 1), low=-4, high=4),
    _activation("mish", lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    _activation("logsigmoid", lambda x: -np.log1p(np.exp(-x)), kernel="log_sigmoid"),
    _activation("logsigmoid", low=-40, high=40, kernel="log_sigmoid", label="large"),
    _activation("softsign", lambda x: x / (1 + np.abs(x))),
]


def _dropout_residual(lib, x):
    # Whatever mask the device's RNG draws, a kept element is x / (1 - p) and a dropped one 0, so this is
    # zero -- and so is its gradient, which is nonzero if backward ignores or mis-scales the mask.
    y = functional(lib).dropout(x, 0.5, training=True)
    return y - lib.where(y != 0, x * 2, 0.0)


_MORE_MOVEMENT = [
    OpCase("contiguous", lambda lib, x: x.transpose(0, 1).contiguous(), [Float((3, 4))]),
    OpCase("clone", lambda lib, x: x.clone(), [Float((3, 4))]),
    OpCase("to", lambda lib, x: x.to(lib.float32).to(lib.float64), [Float((3, 4))], label="dtype",
           rtol64=1e-6, atol64=1e-7, kernels=("to_copy",), gradcheck=False),
    OpCase("to", lambda lib, x: x.to(lib.int32), [Float((3, 4), -5, 5)], label="int", grad=False,
           ref=lambda x: x.astype(np.int32), kernels=("to_copy",)),
    OpCase("index_add", lambda lib, x, i, s: x.index_add(0, i, s), [Float((3, 4)), Index((5,), 3), Float((5, 4))]),
    OpCase("index_add", lambda lib, x, i, s: x.index_add(1, i, s, alpha=-2.0),
           [Float((3, 4)), Index((2,), 4), Float((3, 2))], label="alpha"),
    OpCase("dropout", _dropout_residual, [Float((4, 5))], ref=np.zeros_like, label="kept-scaled"),
]

# Layer kernels: shapes stay small (finite differences perturb every element); float32 sums reassociate.
_N = dict(rtol=1e-4, atol=1e-5, rtol64=1e-6, atol64=1e-8)


def _f(name, **options):
    """``lambda lib, *tensors: functional(lib).<name>(*tensors, **options)``."""
    return lambda lib, *tensors: getattr(functional(lib), name)(*tensors, **options)


def _batch_norm_stats(lib, x, mean, var):
    mean, var = mean.clone(), var.clone()
    functional(lib).batch_norm(x, mean, var, training=True, momentum=0.3)
    return mean, var


_CONV = [
    OpCase("conv1d", _f("conv1d", stride=2, padding=1), [Float((2, 2, 7)), Float((3, 2, 3)), Float((3,))],
           kernels=("conv",), **_N),
    OpCase("conv2d", _f("conv2d"), [Float((1, 2, 4, 5)), Float((3, 2, 3, 2))], kernels=("conv",), **_N),
    OpCase("conv2d", _f("conv2d", stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
           [Float((1, 2, 5, 5)), Float((2, 2, 2, 2)), Float((2,))], label="stride-pad-dilation",
           kernels=("conv",), **_N),
    OpCase("conv2d", _f("conv2d", groups=2, padding="same"), [Float((2, 4, 4, 4)), Float((4, 2, 3, 3)),
           Float((4,))], label="groups-same", kernels=("conv",), **_N),
    OpCase("conv3d", _f("conv3d", padding=1, stride=2), [Float((1, 1, 3, 3, 3)), Float((2, 1, 2, 2, 2))],
           kernels=("conv",), **_N),
    OpCase("conv_transpose1d", _f("conv_transpose1d", stride=2, output_padding=1),
           [Float((2, 2, 4)), Float((2, 3, 3)), Float((3,))], kernels=("conv_transpose",), **_N),
    OpCase("conv_transpose2d", _f("conv_transpose2d", stride=2, padding=1, groups=2),
           [Float((1, 4, 3, 3)), Float((4, 1, 3, 3))], kernels=("conv_transpose",), **_N),
    OpCase("conv_transpose2d", _f("conv_transpose2d", dilation=2), [Float((1, 2, 3, 2)), Float((2, 2, 2, 2)),
           Float((2,))], label="dilation", kernels=("conv_transpose",), **_N),
    OpCase("linear", _f("linear"), [Float((2, 3, 4)), Float((5, 4)), Float((5,))], **_N),
    OpCase("linear", _f("linear"), [Float((3, 4)), Float((2, 4))], label="no-bias", **_N),
    OpCase("linear", _f("linear"), [Float((4,)), Float((2, 4)), Float((2,))], label="1d", **_N),
]

_POOL = [
    OpCase("max_pool2d", _f("max_pool2d", kernel_size=2), [Float((2, 2, 4, 4), distinct=True)],
           kernels=("max_pool",)),
    OpCase("max_pool2d", _f("max_pool2d", kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True),
           [Float((1, 2, 6, 5), distinct=True)], label="pad-ceil", kernels=("max_pool",)),
    OpCase("max_pool1d", _f("max_pool1d", kernel_size=2, stride=1, dilation=2), [Float((2, 2, 6), distinct=True)],
           kernels=("max_pool",)),
    OpCase("max_pool2d", _f("max_pool2d", kernel_size=2, stride=2, padding=1, return_indices=True),
           [Float((1, 2, 5, 4), distinct=True)], label="indices", kernels=("max_pool_with_indices",)),
    OpCase("avg_pool2d", _f("avg_pool2d", kernel_size=2), [Float((2, 2, 4, 4))], kernels=("avg_pool",), **_N),
    OpCase("avg_pool2d", _f("avg_pool2d", kernel_size=3, stride=2, padding=1, ceil_mode=True,
                            count_include_pad=False), [Float((1, 2, 6, 5))], label="pad-ceil-exclude",
           kernels=("avg_pool",), **_N),
    OpCase("avg_pool2d", _f("avg_pool2d", kernel_size=2, stride=1, divisor_override=3), [Float((1, 1, 3, 4))],
           label="divisor", kernels=("avg_pool",), **_N),
    OpCase("avg_pool1d", _f("avg_pool1d", kernel_size=3, stride=2, padding=1), [Float((2, 2, 7))],
           kernels=("avg_pool",), **_N),
    OpCase("adaptive_avg_pool2d", _f("adaptive_avg_pool2d", output_size=(2, 3)), [Float((2, 2, 5, 7))],
           kernels=("adaptive_avg_pool",), **_N),
    OpCase("adaptive_avg_pool1d", _f("adaptive_avg_pool1d", output_size=4), [Float((2, 3, 6))],
           kernels=("adaptive_avg_pool",), **_N),
    OpCase("adaptive_max_pool2d", _f("adaptive_max_pool2d", output_size=(2, 3), return_indices=True),
           [Float((2, 2, 5, 7), distinct=True)], kernels=("adaptive_max_pool",)),
    OpCase("adaptive_max_pool1d", _f("adaptive_max_pool1d", output_size=4), [Float((2, 3, 7), distinct=True)],
           kernels=("adaptive_max_pool",)),
    OpCase("max_unpool2d", lambda lib, x: functional(lib).max_unpool2d(
        *functional(lib).max_pool2d(x, 2, return_indices=True), 2), [Float((2, 2, 4, 4), distinct=True)],
        kernels=("max_unpool", "max_pool_with_indices")),
    OpCase("max_unpool1d", lambda lib, x: functional(lib).max_unpool1d(
        *functional(lib).max_pool1d(x, 2, return_indices=True), 2, output_size=[7]), [Float((2, 3, 7), distinct=True)],
        kernels=("max_unpool", "max_pool_with_indices")),
    OpCase("interpolate", _f("interpolate", scale_factor=2, mode="nearest"), [Float((1, 2, 3, 4))],
           label="nearest", kernels=("upsample",), **_N),
    OpCase("interpolate", _f("interpolate", size=(5, 3), mode="bilinear", align_corners=True),
           [Float((2, 2, 3, 4))], label="bilinear", kernels=("upsample",), **_N),
    OpCase("interpolate", _f("interpolate", scale_factor=1.7, mode="bicubic"), [Float((1, 2, 3, 4))],
           label="bicubic", kernels=("upsample",), **_N),
    OpCase("interpolate", _f("interpolate", size=(3, 4, 2), mode="trilinear"), [Float((1, 1, 2, 3, 4))],
           label="trilinear", kernels=("upsample",), **_N),
    OpCase("interpolate", _f("interpolate", size=7, mode="nearest-exact"), [Float((2, 2, 5))],
           label="nearest-exact", kernels=("upsample",), **_N),
]

# grid points away from the borders and the integer source coordinates, where the weights have kinks
_POOL += [
    OpCase("grid_sample", _f("grid_sample", align_corners=False), [Float((2, 2, 3, 4)), Float((2, 3, 2, 2), -0.8, 0.8)],
           label="bilinear", **_N),
    OpCase("grid_sample", _f("grid_sample", mode="bicubic", padding_mode="reflection", align_corners=True),
           [Float((1, 2, 4, 3)), Float((1, 2, 2, 2), -0.8, 0.8)], label="bicubic-reflection", **_N),
    OpCase("grid_sample", _f("grid_sample", mode="nearest", padding_mode="border", align_corners=False),
           [Float((1, 2, 3, 3)), Float((1, 2, 2, 2), -0.8, 0.8, grad=False)], label="nearest-border", **_N),
    OpCase("grid_sample", _f("grid_sample", align_corners=True), [Float((1, 1, 2, 3, 3)),
           Float((1, 2, 1, 2, 3), -0.8, 0.8)], label="5d", **_N),
]

def _fractional_samples(lib, x, n):
    """Fixed window starts, so that both libraries pool the same windows."""
    samples = np.linspace(0.1, 0.9, x.shape[0] * x.shape[1] * n).reshape(x.shape[0], x.shape[1], n)
    return lib.tensor(samples, dtype=x.dtype, device=x.device)


_POOL += [
    OpCase("fractional_max_pool2d", lambda lib, x: functional(lib).fractional_max_pool2d(
        x, 2, output_size=(4, 3), _random_samples=_fractional_samples(lib, x, 2)), [Float((2, 2, 7, 6), distinct=True)],
        kernels=("fractional_max_pool",)),
    OpCase("fractional_max_pool3d", lambda lib, x: functional(lib).fractional_max_pool3d(
        x, (2, 3, 2), output_size=(3, 2, 3), _random_samples=_fractional_samples(lib, x, 3)),
        [Float((1, 2, 5, 5, 5), distinct=True)], kernels=("fractional_max_pool",)),
]

_NORM = [
    OpCase("batch_norm", lambda lib, x, w, b: functional(lib).batch_norm(x, None, None, w, b, training=True),
           [Float((4, 3, 2)), Float((3,)), Float((3,))], label="train", **_N),
    OpCase("batch_norm", lambda lib, x, m, v, w, b: functional(lib).batch_norm(x, m, v, w, b, eps=1e-3),
           [Float((3, 2, 2, 2)), Float((2,), grad=False), Float((2,), 0.5, 2.0, grad=False), Float((2,)),
            Float((2,))], label="eval", **_N),
    OpCase("batch_norm", _batch_norm_stats, [Float((5, 2)), Float((2,), grad=False),
                                             Float((2,), 0.5, 2.0, grad=False)], grad=False, label="running-stats",
           **_N),
    OpCase("layer_norm", lambda lib, x, w, b: functional(lib).layer_norm(x, (3, 2), w, b),
           [Float((2, 3, 2)), Float((3, 2)), Float((3, 2))], **_N),
    OpCase("layer_norm", lambda lib, x: functional(lib).layer_norm(x, (4,), eps=1e-3), [Float((3, 4))],
           label="no-affine", **_N),
    OpCase("group_norm", lambda lib, x, w, b: functional(lib).group_norm(x, 2, w, b),
           [Float((2, 4, 3)), Float((4,)), Float((4,))], **_N),
    OpCase("group_norm", lambda lib, x: functional(lib).group_norm(x, 1), [Float((2, 2, 2, 2))], label="one-group",
           **_N),
]

# PyTorch's CrossMapLRN2d backward is its forward's derivative for one channel only (see the kernel)
_NORM += [
    OpCase("CrossMapLRN2d", lambda lib, x: lib.nn.CrossMapLRN2d(3, 0.3, 0.6, 1.5)(x), [Float((2, 1, 3, 2))],
           kernels=("cross_map_lrn2d",), **_N),
]

_CLASSES = [Float((4, 3)), Index((4,), 3)]
_LOSS = [
    OpCase("cross_entropy", _f("cross_entropy"), _CLASSES, **_N),
    OpCase("cross_entropy", lambda lib, x, t, w: functional(lib).cross_entropy(x, t, w, ignore_index=1,
                                                                               label_smoothing=0.2),
           [Float((5, 3)), Index((5,), 3), Float((3,), 0.5, 1.5, grad=False)], label="weight-ignore-smoothing",
           **_N),
    OpCase("cross_entropy", _f("cross_entropy", reduction="none"), [Float((2, 3, 4)), Index((2, 4), 3)],
           label="kdim-none", **_N),
    OpCase("cross_entropy", _f("cross_entropy", reduction="sum"), [Float((4, 3)), Float((4, 3), 0, 1, grad=False)],
           label="probabilities", **_N),
    OpCase("nll_loss", _f("nll_loss"), _CLASSES, **_N),
    OpCase("nll_loss", lambda lib, x, t, w: functional(lib).nll_loss(x, t, w, reduction="sum", ignore_index=0),
           [Float((5, 3)), Index((5,), 3), Float((3,), 0.5, 1.5, grad=False)], label="weight-ignore-sum", **_N),
    OpCase("nll_loss", _f("nll_loss", reduction="none"), [Float((2, 3, 2)), Index((2, 2), 3)], label="kdim-none",
           **_N),
    OpCase("mse_loss", _f("mse_loss"), [Float((3, 4)), Float((3, 4))], **_N),
    OpCase("mse_loss", _f("mse_loss", reduction="none"), [Float((3, 4)), Float((3, 4))], label="none", **_N),
    OpCase("l1_loss", _f("l1_loss", reduction="sum"), [Float((3, 4)), Float((3, 4))], **_N),
    OpCase("smooth_l1_loss", _f("smooth_l1_loss", beta=0.5), [Float((3, 4)), Float((3, 4))], **_N),
    OpCase("huber_loss", _f("huber_loss", delta=0.7, reduction="none"), [Float((3, 4)), Float((3, 4))], **_N),
    OpCase("binary_cross_entropy", _f("binary_cross_entropy"), [Float((3, 4), 0.1, 0.9),
           Float((3, 4), 0, 1, grad=False)], **_N),
    OpCase("binary_cross_entropy", _f("binary_cross_entropy", reduction="none"),
           [Float((3, 4), 0.1, 0.9), Float((3, 4), 0, 1, grad=False), Float((4,), 0.5, 1.5, grad=False)],
           label="weight-none", **_N),
    OpCase("binary_cross_entropy_with_logits", _f("binary_cross_entropy_with_logits"),
           [Float((3, 4), -5, 5), Float((3, 4), 0, 1, grad=False)], **_N),
    OpCase("binary_cross_entropy_with_logits",
           lambda lib, x, t, w, pw: functional(lib).binary_cross_entropy_with_logits(x, t, w, pos_weight=pw,
                                                                                      reduction="sum"),
           [Float((3, 4), -5, 5), Float((3, 4), 0, 1, grad=False), Float((4,), 0.5, 1.5, grad=False),
            Float((4,), 0.5, 2, grad=False)], label="weight-pos_weight", **_N),
]

# CTC: PyTorch's gradient is the derivative through log_softmax (its eq. 16), so the cases take logits
_LOSS += [
    OpCase("ctc_loss", lambda lib, x: functional(lib).ctc_loss(x.log_softmax(2), lib.tensor([[1, 2, 2], [3, 0, 0]]),
                                                               [5, 4], [3, 1]), [Float((5, 2, 4))], **_N),
    OpCase("ctc_loss", lambda lib, x: functional(lib).ctc_loss(x.log_softmax(1), lib.tensor([2, 0]), [4], [2],
                                                               blank=1, reduction="sum"),
           [Float((4, 3))], label="unbatched-blank-sum", **_N),
]

_EMBEDDING = [
    OpCase("embedding", lambda lib, w, i: functional(lib).embedding(i, w), [Float((5, 3)), Index((2, 4), 5)]),
    OpCase("embedding", lambda lib, w, i: functional(lib).embedding(i, w, padding_idx=0),
           [Float((4, 2)), Index((6,), 4)], label="padding_idx"),
]


def _optimizer_steps(lib, name, p, g, **options):
    """Three steps of ``lib.optim.<name>`` on one parameter, with a different gradient at each step."""
    param = lib.nn.Parameter(p.clone())
    optimizer = getattr(lib.optim, name)([param], **options)
    for step in range(3):
        param.grad = g * (step + 1) - p * step
        optimizer.step()
    return param.detach()


def _sgd_reference(p, g, *, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
    """``torch.optim.SGD``'s update rule, in numpy, for the same three steps as :func:`_optimizer_steps`."""
    param, buf = p.copy(), None
    for step in range(3):
        d = g * (step + 1) - p * step + weight_decay * param
        if momentum:
            buf = d.copy() if buf is None else momentum * buf + d
            d = d + momentum * buf if nesterov else buf
        param = param - lr * d
    return param.astype(p.dtype)


def _adam_reference(p, g, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    """``torch.optim.Adam`` / ``AdamW``'s update rule, in numpy, for the same three steps."""
    (beta1, beta2), param = betas, p.astype(np.float64)
    m = v = v_max = np.zeros_like(param)
    for step in range(1, 4):
        d = g * step - p * (step - 1)
        if decoupled:
            param = param * (1 - lr * weight_decay)
        else:
            d = d + weight_decay * param
        m = beta1 * m + (1 - beta1) * d
        v = beta2 * v + (1 - beta2) * d * d
        v_max = np.maximum(v_max, v) if amsgrad else v
        denom = np.sqrt(v_max) / np.sqrt(1 - beta2 ** step) + eps
        param = param - lr / (1 - beta1 ** step) * m / denom
    return param.astype(p.dtype)


_STATE = [Float((3, 4), grad=False), Float((3, 4), grad=False)]
_OPT = dict(grad=False, rtol=1e-5, atol=1e-6, rtol64=1e-10, atol64=1e-12)
_OPTIMIZER = [
    OpCase("SGD", lambda lib, p, g: _optimizer_steps(lib, "SGD", p, g, lr=0.1), _STATE,
           ref=lambda p, g: _sgd_reference(p, g, lr=0.1), kernels=("sgd_update",), **_OPT),
    OpCase("SGD", lambda lib, p, g: _optimizer_steps(lib, "SGD", p, g, lr=0.1, momentum=0.9, nesterov=True,
                                                     weight_decay=0.01), _STATE,
           ref=lambda p, g: _sgd_reference(p, g, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
           label="nesterov-decay", kernels=("sgd_update",), **_OPT),
    OpCase("Adam", lambda lib, p, g: _optimizer_steps(lib, "Adam", p, g, lr=0.01), _STATE,
           ref=lambda p, g: _adam_reference(p, g, lr=0.01), kernels=("adam_update",), **_OPT),
    OpCase("Adam", lambda lib, p, g: _optimizer_steps(lib, "Adam", p, g, lr=0.01, weight_decay=0.1, amsgrad=True),
           _STATE, ref=lambda p, g: _adam_reference(p, g, lr=0.01, weight_decay=0.1, amsgrad=True),
           label="amsgrad-decay", kernels=("adam_update",), **_OPT),
    OpCase("AdamW", lambda lib, p, g: _optimizer_steps(lib, "AdamW", p, g, lr=0.01, weight_decay=0.1), _STATE,
           ref=lambda p, g: _adam_reference(p, g, lr=0.01, weight_decay=0.1, decoupled=True),
           kernels=("adam_update",), **_OPT),
]

_RECURRENT = [
    OpCase("lstm_cell", lambda lib, x, h, c, w_ih, w_hh, b_ih, b_hh: lib.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh),
           [Float((3, 5)), Float((3, 4)), Float((3, 4)), Float((16, 5)), Float((16, 4)), Float((16,)), Float((16,))],
           **_N),
    OpCase("lstm_cell", lambda lib, x, h, c, w_ih, w_hh: lib.lstm_cell(x, (h, c), w_ih, w_hh),
           [Float((2, 3)), Float((2, 2)), Float((2, 2)), Float((8, 3)), Float((8, 2))], label="no-bias", **_N),
    OpCase("gru_cell", lambda lib, x, h, w_ih, w_hh, b_ih, b_hh: lib.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh),
           [Float((3, 5)), Float((3, 4)), Float((12, 5)), Float((12, 4)), Float((12,)), Float((12,))], **_N),
    OpCase("gru_cell", lambda lib, x, h, w_ih, w_hh: lib.gru_cell(x, h, w_ih, w_hh),
           [Float((2, 3)), Float((2, 2)), Float((6, 3)), Float((6, 2))], label="no-bias", **_N),
    # a whole sequence (torch.lstm), bidirectional: nn.LSTM's one-node path, lstm_layer, both ways in time
    OpCase("lstm_layer", lambda lib, x, h, c, *w: tuple(lib.lstm(x, (h, c), list(w), True, 1, 0.0, False, True,
                                                                 False)),
           [Float((4, 2, 3)), Float((2, 2, 3)), Float((2, 2, 3))] + [Float((12, 3)), Float((12, 3)), Float((12,)),
                                                                     Float((12,))] * 2, **_N),
]

_MORE_POINTWISE = [
    _unary("asin", np.arcsin, low=-0.9, high=0.9), _unary("acos", np.arccos, low=-0.9, high=0.9),
    _unary("atan", np.arctan, low=-3, high=3), _unary("asinh", np.arcsinh, low=-3, high=3),
    _unary("acosh", np.arccosh, low=1.1, high=4), _unary("atanh", np.arctanh, low=-0.9, high=0.9),
    _unary("sinh", np.sinh), _unary("cosh", np.cosh), _unary("sinc", np.sinc, low=-3, high=3),
    _unary("deg2rad", np.deg2rad, low=-300, high=300), _unary("rad2deg", np.rad2deg),
    _unary("frac", lambda x: x - np.trunc(x), low=-3, high=3), _unary("sgn", np.sign, away=True, low=0.1),
    _unary("logit", lambda x: np.log(x / (1 - x)), low=0.05, high=0.95),
    _unary("logit", lambda x: np.log(np.clip(x, 0.2, 0.8) / (1 - np.clip(x, 0.2, 0.8))), low=0.05, high=0.95,
           fn=lambda lib, x: lib.logit(x, eps=0.2), label="eps"),
    _binary("atan2", np.arctan2, away=True, other=(0.2, 2)), _binary("hypot", np.hypot, away=True, other=(0.2, 2)),
    _binary("copysign", np.copysign, away=True, other=(0.2, 2)),
    _binary("logaddexp", np.logaddexp), _binary("logaddexp2", np.logaddexp2),
    _binary("fmax", np.fmax), _binary("fmin", np.fmin),
    OpCase("ldexp", lambda lib, a, b: lib.ldexp(a, lib.round(b)), [Float((2, 3)), Float((3,), -3, 3)],
           ref=lambda a, b: a * np.exp2(np.round(b)), broadcast=True),
    OpCase("nextafter", lambda lib, a, b: lib.nextafter(a, b), [Float((2, 3)), Float((3,))], ref=np.nextafter,
           grad=False),
    OpCase("heaviside", lambda lib, a, b: lib.heaviside(a, b), [Special((2, 4)), Float((4,))],
           ref=lambda a, b: np.heaviside(a, b), grad=False),
    _unary("angle", lambda x: np.where(x < 0, np.pi, 0.0).astype(x.dtype), away=True, low=0.1),
    _unary("frexp", lambda x: np.frexp(x)[0], fn=lambda lib, x: lib.frexp(x).mantissa, low=-5, high=5),
    OpCase("frexp", lambda lib, x: lib.frexp(x).exponent, [Float((2, 3), -5, 5)],
           ref=lambda x: np.frexp(x)[1].astype(np.int32), grad=False, label="exponent"),
    _unary("nan_to_num", np.nan_to_num),
    OpCase("nan_to_num", lambda lib, x: lib.nan_to_num(x, nan=1.5, posinf=9.0), [Special((2, 4))],
           ref=lambda x: np.nan_to_num(x, nan=1.5, posinf=9.0), grad=False, label="special"),
    _compare_op("gcd", np.gcd, [Index((2, 3), 30), Index((3,), 30)]),
    _compare_op("lcm", np.lcm, [Index((2, 3), 30), Index((3,), 30)]),
]

def _well_conditioned(lib, x):
    return x + 3 * lib.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _positive_definite(lib, x):
    return x @ x.transpose(-2, -1) + 3 * lib.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _svd_invariant(lib, x):
    """Singular vectors are defined up to sign: a function of them that is not."""
    u, s, v = lib.svd(x)
    return (u * s.unsqueeze(-2)) @ v.transpose(-2, -1), (u @ u.transpose(-2, -1)).sin(), s


_LINALG_BREADTH = [
    OpCase("det", lambda lib, x: lib.det(x), [Float((2, 3, 3))], **_L),
    OpCase("slogdet", lambda lib, x: lib.slogdet(x)[1], [Float((3, 3))], **_L),
    OpCase("inverse", lambda lib, x: lib.inverse(_well_conditioned(lib, x)), [Float((2, 3, 3))], **_L),
    OpCase("pinverse", lambda lib, x: lib.pinverse(x), [Float((4, 3), 0.5, 2)], **_L),
    OpCase("svd", _svd_invariant, [Float((4, 3))], rtol=1e-3, atol=1e-4),
    OpCase("cholesky", lambda lib, x: lib.cholesky(_positive_definite(lib, x)), [Float((3, 3))], **_L),
    OpCase("triangular_solve", lambda lib, b, a: tuple(lib.triangular_solve(b, _well_conditioned(lib, a))),
           [Float((3, 2)), Float((3, 3))], **_L),
    OpCase("lu", lambda lib, x: lib.lu(_well_conditioned(lib, x))[0], [Float((3, 3))], **_L),
    OpCase("matrix_exp", lambda lib, x: lib.matrix_exp(x), [Float((2, 3, 3))], **_L),
    # Householder QR has LAPACK's signs in both frameworks
    OpCase("qr", lambda lib, x: tuple(lib.linalg.qr(x)), [Float((2, 4, 3))], **_L),
    # eigenvalues and the sign-free squares of the vectors
    OpCase("eigh", lambda lib, x: _eigh_invariant(lib.linalg.eigh(x + x.transpose(-2, -1))), [Float((2, 4, 4))],
           **_L),
    OpCase("linalg_solve", lambda lib, a, b: lib.linalg.solve(_well_conditioned(lib, a), b),
           [Float((2, 3, 3)), Float((2, 3, 2))], **_L),
]


def _eigh_invariant(pair):
    values, vectors = pair
    return values, vectors * vectors


_SCATTER_REDUCE = [
    OpCase("scatter_reduce", lambda lib, x, i, s, reduce=reduce, include_self=include_self:
           x.scatter_reduce(0, i, s, reduce, include_self=include_self),
           [Float((3, 4), distinct=True), Index((5, 4), 3), Float((5, 4), distinct=True)],
           label=f"{reduce}{'' if include_self else '-exclude-self'}", **_R)
    for reduce in ("sum", "prod", "mean", "amax", "amin") for include_self in (True, False)
]

_STATISTICS = [
    OpCase("median", lambda lib, x: lib.median(x), [Float((3, 4), distinct=True)], kernels=("median_all",)),
    OpCase("nanmedian", lambda lib, x: lib.nanmedian(x), [Float((5,), distinct=True)], kernels=("median_all",)),
    OpCase("logcumsumexp", lambda lib, x: lib.logcumsumexp(x, 1), [Float((3, 4))], **_R),
    OpCase("logcumsumexp", lambda lib, x: x.logcumsumexp(0), [Float((4, 2), -40, 40)], label="wide", **_R),
]

def _vectorized(function):
    return lambda x: np.vectorize(function, otypes=[x.dtype])(x)


_SPECIAL = [
    _unary("lgamma", _vectorized(math.lgamma), low=0.2, high=6), _unary("digamma", low=0.3, high=6),
    OpCase("polygamma", lambda lib, x: lib.polygamma(2, x), [Float((2, 3), 0.3, 4)], broadcast=True),
    OpCase("mvlgamma", lambda lib, x: lib.mvlgamma(x, 3), [Float((2, 3), 1.2, 5)], broadcast=True),
    _unary("erfc", _vectorized(math.erfc), low=-2, high=4), _unary("erfinv", low=-0.95, high=0.95),
    _unary("i0", np.i0, low=-4, high=4),
    OpCase("igamma", lambda lib, a, x: lib.igamma(a, x), [Float((2, 3), 0.5, 4, grad=False), Float((3,), 0.2, 5)],
           broadcast=True),
    OpCase("igammac", lambda lib, a, x: lib.igammac(a, x), [Float((2, 3), 0.5, 4, grad=False), Float((3,), 0.2, 5)],
           broadcast=True),
]

#: Every case, in table order.
CASES: list[OpCase] = (_ELEMENTWISE + _MORE_POINTWISE + _SPECIAL + _NONDIFFERENTIABLE + _ACTIVATION + _REDUCE + _MOVEMENT + _MORE_MOVEMENT
                       + _LINALG + _NN + _CONV + _POOL + _NORM + _LOSS + _EMBEDDING + _OPTIMIZER + _RECURRENT
                       + _LINALG_BREADTH + _STATISTICS + _SCATTER_REDUCE)
