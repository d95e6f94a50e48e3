"""Hostile inputs for corenn-numba's entry points, compared with the core: run in a subprocess.

``test_hostile_inputs.py`` runs ``python _hostile_cases.py SECONDS SEED LOG`` so that a crash
(SIGSEGV in compiled code) fails the test with the case that caused it instead of killing
pytest. Every case is written to LOG and flushed *before* it runs.

First every overridden op family runs once (which also compiles or loads every kernel), and
the arguments of the first call of each compiled entry point are recorded. Then, for two
thirds of SECONDS:

- **ops**: hypothesis draws an op the plugin overrides (linear, conv, conv_transpose, pooling,
  norms, softmax, cross-entropy, the scatter family, optimizer steps), shapes (empty ones
  too), dtypes, layouts (contiguous, transposed, flipped -- negative strides --, every other
  element) and values (nan, +-inf, -0.0, 1e20, 1e30, 3e38, denormals). The op runs with the
  plugin's kernels and with ``corenn_numba.disabled()``: both must raise the same exception
  type, or give the same result (inf and nan at the same places, finite values within float
  rounding of the operands' magnitude) and, where the result is finite, the same gradients.

and for the last third:

- **entries**: the compiled entry points themselves, called with the recorded arguments and
  one of them mutated (a dimension one shorter or longer, another dtype, a transposed or
  flipped array, a list, a read-only array, another integer, a non-bool flag). Each call must
  return or raise TypeError/ValueError/IndexError -- never crash.

Examples run in batches of ten, each batch seeded from SEED; a failure exits non-zero after
hypothesis has shrunk and printed the example.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings

import hypothesis
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import corenn
import corenn.nn.functional as F
import corenn_numba
from corenn_numba import linear as numba_linear

warnings.simplefilter("ignore")  # numpy's overflow/invalid warnings are the point here
numba_linear.MIN_WORK = 0  # small products take the compiled path too (it needs >= 8 rows)

SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e20, -1e20, 1e30, 3e38, -3e38, 1e-45, 1e-40]
LAYOUTS = ["contiguous", "transposed", "flipped", "strided"]
ALLOWED = (TypeError, ValueError, IndexError, RuntimeError)


class Log:
    """Each case, written and flushed before it runs: what the parent reports after a crash."""

    def __init__(self, path):
        self.file = open(path, "w")

    def case(self, text):
        self.file.write(text + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


LOG: Log | None = None


# ---------------------------------------------------------------------------------------------------------
# drawn arrays and tensors
# ---------------------------------------------------------------------------------------------------------

@st.composite
def values(draw, shape, dtype, hostile=True, low=-3.0, high=3.0):
    """A numpy array: normal values, and (when ``hostile``) some replaced by nan, inf, -0.0, huge or tiny."""
    size = math.prod(shape)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    array = rng.uniform(low, high, size)
    if hostile and size and draw(st.booleans()):
        count = draw(st.integers(1, min(size, 4)))
        for _ in range(count):
            array[draw(st.integers(0, size - 1))] = draw(st.sampled_from(SPECIAL))
        if draw(st.integers(0, 9)) == 0:  # now and then every value huge
            array *= draw(st.sampled_from([1e20, 1e30]))
    return array.reshape(shape).astype(dtype)


def tensor(array, layout, requires_grad=False):
    """A corenn tensor with ``array``'s values and the drawn layout (a view made by corenn's own ops)."""
    if array.ndim < 2 and layout == "transposed":
        layout = "flipped"
    if layout == "transposed":
        base = corenn.tensor(np.ascontiguousarray(np.swapaxes(array, -1, -2)), requires_grad=requires_grad)
        return base, base.transpose(-1, -2)
    if layout == "flipped" and array.ndim:
        base = corenn.tensor(np.ascontiguousarray(np.flip(array, -1)), requires_grad=requires_grad)
        return base, base.flip(-1)
    if layout == "strided" and array.ndim:
        wide = np.repeat(array, 2, axis=-1)
        base = corenn.tensor(wide, requires_grad=requires_grad)
        return base, base[..., ::2]
    base = corenn.tensor(array, requires_grad=requires_grad)
    return base, base


# ---------------------------------------------------------------------------------------------------------
# the ops, each a builder: draw -> (description, run(), scale of the operands)
# ---------------------------------------------------------------------------------------------------------
# ``run()`` builds fresh tensors from the drawn arrays, calls the public op and returns the output
# arrays and the gradients of the float inputs (None where there is no graph).

def _outputs_and_grads(leaves, out, grad_seed):
    outs = out if isinstance(out, tuple) else (out,)
    arrays = [o.detach().numpy().copy() for o in outs]
    first = outs[0]
    grads = None
    if first.requires_grad and first.dtype.is_floating_point and np.isfinite(arrays[0]).all():
        upstream = np.random.default_rng(grad_seed).standard_normal(first.shape).astype(arrays[0].dtype)
        first.backward(corenn.tensor(upstream))
        grads = [None if leaf.grad is None else leaf.grad.numpy().copy() for leaf in leaves]
    return arrays, grads


@st.composite
def linear_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rows = draw(st.sampled_from([0, 1, 3, 8, 9, 16, 33]))
    inputs, outputs = draw(st.integers(0, 24)), draw(st.integers(0, 40))
    bias_shape = draw(st.sampled_from([None, (outputs,), (1,), (), (rows, outputs), (rows, 1), (outputs + 1,)]))
    x = draw(values((rows, inputs), dtype))
    w = draw(values((outputs, inputs), dtype))
    b = None if bias_shape is None else draw(values(bias_shape, dtype))
    layouts = draw(st.lists(st.sampled_from(LAYOUTS), min_size=3, max_size=3))

    def run():
        made = [tensor(a, layout, True) for a, layout in zip((x, w), layouts)]
        if b is not None:
            made.append(tensor(b, layouts[2], True))
        return [m[0] for m in made], F.linear(*[m[1] for m in made])

    scale = (1 + _magnitude(x)) * (1 + _magnitude(w)) * (1 + inputs) + _magnitude(b)
    return (f"linear x{x.shape} w{w.shape} b{None if b is None else b.shape} {dtype.__name__} {layouts}", run, scale,
            {"x": x, "w": w, "b": b})


@st.composite
def conv_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    dims = draw(st.sampled_from([1, 2]))
    transposed = draw(st.booleans())
    groups = draw(st.integers(1, 2))
    c_in, c_out = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    n = draw(st.sampled_from([0, 1, 2]))
    size = tuple(draw(st.integers(1, 7)) for _ in range(dims))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    stride, dilation = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    padding = draw(st.integers(0, 2))
    if not transposed and draw(st.integers(0, 4)) == 0:
        padding, stride = draw(st.sampled_from(["same", "valid"])), 1
    x = draw(values((n, c_in) + size, dtype))
    w_shape = (c_in, c_out // groups) + kernel if transposed else (c_out, c_in // groups) + kernel
    w = draw(values(w_shape, dtype))
    b = draw(values((c_out,), dtype)) if draw(st.booleans()) else None
    layouts = draw(st.lists(st.sampled_from(LAYOUTS), min_size=3, max_size=3))
    extra = {}
    if transposed:
        extra["output_padding"] = draw(st.integers(0, 1))
    name = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"

    def run():
        made = [tensor(a, layout, True) for a, layout in zip((x, w), layouts)]
        bias = None
        if b is not None:
            made.append(tensor(b, layouts[2], True))
            bias = made[2][1]
        out = getattr(F, name)(made[0][1], made[1][1], bias, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, **extra)
        return [m[0] for m in made], out

    depth = c_in * math.prod(kernel)
    scale = (1 + _magnitude(x)) * (1 + _magnitude(w)) * (1 + depth) + _magnitude(b)
    return (f"{name} x{x.shape} w{w.shape} bias={b is not None} stride={stride} padding={padding} "
            f"dilation={dilation} groups={groups} {extra} {dtype.__name__} {layouts}"), run, scale, {"x": x, "w": w,
                                                                                                 "b": b}


@st.composite
def pool_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    dims = draw(st.sampled_from([1, 2]))
    kind = draw(st.sampled_from(["max", "avg", "adaptive"]))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + tuple(draw(st.integers(1, 9)) for _ in range(dims))
    x = draw(values(shape, dtype))
    layout = draw(st.sampled_from(LAYOUTS))
    kernel = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 3))
    padding = draw(st.integers(0, kernel // 2))
    ceil_mode = draw(st.booleans())
    if kind == "max":
        dilation = draw(st.integers(1, 2))
        indices = draw(st.booleans())
        args = (kernel, stride, padding, dilation, ceil_mode, indices)
        call = lambda t: getattr(F, f"max_pool{dims}d")(t, *args)  # noqa: E731
        text = f"dilation={dilation} return_indices={indices}"
    elif kind == "avg":
        include = draw(st.booleans())
        divisor = draw(st.sampled_from([None, 1, 3])) if dims == 2 else None
        extra = {} if dims == 1 else {"divisor_override": divisor}
        args = (kernel, stride, padding, ceil_mode, include)
        call = lambda t: getattr(F, f"avg_pool{dims}d")(t, *args, **extra)  # noqa: E731
        text = f"count_include_pad={include} {extra}"
    else:
        # Window sums that overflow float32 are inf with the plugin (and PyTorch) but finite in the core,
        # which averages through a matrix: a difference of the core's, kept out of this test.
        x = np.where(np.isfinite(x), np.clip(x, -1e30, 1e30), x)
        out_size = tuple(draw(st.integers(1, 5)) for _ in range(dims))
        call = lambda t: getattr(F, f"adaptive_avg_pool{dims}d")(t, out_size)  # noqa: E731
        text = f"output_size={out_size}"

    def run():
        leaf, t = tensor(x, layout, True)
        return [leaf], call(t)

    return (f"{kind}_pool{dims}d x{x.shape} kernel={kernel} stride={stride} padding={padding} ceil={ceil_mode} "
            f"{text} {dtype.__name__} {layout}"), run, 1 + _magnitude(x), {"x": x}


@st.composite
def norm_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    kind = draw(st.sampled_from(["layer", "group", "batch"]))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)) * 2) + tuple(draw(st.integers(1, 4))
                                                                             for _ in range(draw(st.integers(0, 2))))
    x = draw(values(shape, dtype))
    if draw(st.integers(0, 5)) == 0:
        # Constant groups (nan with eps=0). Of values whose sums are exact: a constant 1e30 has a variance of
        # rounding noise, different for every order of the additions, that normalising would magnify.
        x[...] = draw(st.sampled_from([1.0, 0.0, -2.5]))
    eps = draw(st.sampled_from([1e-5, 0.0, 1e-3]))
    layout = draw(st.sampled_from(LAYOUTS))
    affine = draw(st.booleans())
    if kind == "layer":
        normalized = shape[len(shape) - draw(st.integers(1, len(shape) - 1)):]
        affine_shape = normalized
    else:
        affine_shape = shape[1:2]
    weight = draw(values(affine_shape, dtype, hostile=False)) if affine else None
    bias = draw(values(affine_shape, dtype, hostile=False)) if affine else None
    groups = draw(st.sampled_from([g for g in (1, 2, shape[1]) if shape[1] % g == 0]))
    training = draw(st.booleans())

    def run():
        leaf, t = tensor(x, layout, True)
        leaves = [leaf]
        w = b = None
        if affine:
            w_leaf, w = tensor(weight, layout, True)
            b_leaf, b = tensor(bias, "contiguous", True)
            leaves += [w_leaf, b_leaf]
        if kind == "layer":
            out = F.layer_norm(t, normalized, w, b, eps)
        elif kind == "group":
            out = F.group_norm(t, groups, w, b, eps)
        else:
            mean, var = corenn.zeros(shape[1], dtype=t.dtype), corenn.ones(shape[1], dtype=t.dtype)
            out = F.batch_norm(t, mean, var, w, b, training=training, eps=eps)
            return leaves, (out, mean, var)
        return leaves, out

    # Normalised values are of order 1; the running mean and variance of the data's magnitude and its square;
    # the gradients of 1/std, the largest over the groups (rounding noise times it: a near-constant group).
    magnitude = _magnitude(x)
    wide = x.astype(np.float64)
    if kind == "layer":
        grouped = wide.reshape(-1, math.prod(normalized))
    elif kind == "group":
        grouped = wide.reshape(shape[0] * groups, -1)
    else:
        grouped = np.moveaxis(wide, 1, 0).reshape(shape[1], -1) if training else np.ones((1, 2))
    with np.errstate(all="ignore"):
        invstd = 1 / np.sqrt(np.nanmin(grouped.var(axis=1)) + eps) if grouped.size else 1.0
    scale = {"out": [1.0, 1 + magnitude, 1 + magnitude ** 2], "grad": 1 + (invstd if np.isfinite(invstd) else 0)}
    return (f"{kind}_norm x{x.shape} eps={eps} affine={affine} groups={groups} training={training} "
            f"{dtype.__name__} {layout}"), run, scale, {"x": x, "weight": weight, "bias": bias}


@st.composite
def softmax_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    kind = draw(st.sampled_from(["softmax", "log_softmax", "cross_entropy"]))
    n, c = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    spatial = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
    x = draw(values((n, c) + spatial, dtype))
    if draw(st.booleans()):
        x[:, 0] = -np.inf  # a masked class
    layout = draw(st.sampled_from(LAYOUTS))
    if kind != "cross_entropy":
        dim = draw(st.sampled_from([-1, 0, 1]))

        def run():
            leaf, t = tensor(x, layout, True)
            return [leaf], getattr(F, kind)(t, dim=dim)

        return f"{kind} x{x.shape} dim={dim} {dtype.__name__} {layout}", run, 1.0, {"x": x}
    target = draw(values((n,) + spatial, np.float64, hostile=False, low=0, high=c)).astype(np.int64)
    ignore = draw(st.sampled_from([-100, 0, 1]))
    if draw(st.integers(0, 9)) == 0:
        target.reshape(-1)[0] = draw(st.sampled_from([c, -1, -100]))
    kw = {"ignore_index": ignore, "reduction": draw(st.sampled_from(["mean", "sum", "none"])),
          "label_smoothing": draw(st.sampled_from([0.0, 0.1]))}
    weight = draw(values((c,), dtype, hostile=False, low=0.5, high=2)) if draw(st.booleans()) else None

    def run():
        leaf, t = tensor(x, layout, True)
        w = None if weight is None else corenn.tensor(weight)
        return [leaf], F.cross_entropy(t, corenn.tensor(target), weight=w, **kw)

    return (f"cross_entropy x{x.shape} weight={weight is not None} {kw} {dtype.__name__} {layout}", run, 1.0,
            {"x": x, "target": target, "weight": weight})


@st.composite
def scatter_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    kind = draw(st.sampled_from(["gather", "index_select", "index_add", "scatter_add", "embedding", "getitem",
                                 "pad"]))
    shape = (draw(st.integers(1, 5)), draw(st.integers(1, 4)))
    x = draw(values(shape, dtype))
    layout = draw(st.sampled_from(LAYOUTS))
    dim = draw(st.integers(0, 1))
    size = shape[dim]
    count = draw(st.integers(0, 6))
    index = np.array(draw(st.lists(st.integers(-size - 1, size), min_size=count, max_size=count)), dtype=np.int64)
    if draw(st.booleans()):
        index = np.clip(index, 0, size - 1)  # mostly valid indices, with repeats
    idx_shape = list(shape)
    idx_shape[dim] = count
    grid = np.resize(index, idx_shape) if count else np.zeros(idx_shape, np.int64)  # for gather and scatter_add
    mode = draw(st.sampled_from(["reflect", "replicate", "circular"]))

    def run():
        leaf, t = tensor(x, layout, True)
        if kind == "gather":
            return [leaf], corenn.gather(t, dim, corenn.tensor(grid))
        if kind == "index_select":
            return [leaf], corenn.index_select(t, dim, corenn.tensor(index))
        if kind == "index_add":
            src_shape = list(shape)
            src_shape[dim] = index.size
            return [leaf], t.index_add(dim, corenn.tensor(index), corenn.tensor(np.ones(src_shape, dtype)))
        if kind == "scatter_add":
            return [leaf], t.scatter_add(dim, corenn.tensor(grid), corenn.tensor(np.ones(grid.shape, dtype)))
        if kind == "embedding":
            return [leaf], F.embedding(corenn.tensor(index), t)
        if kind == "getitem":
            return [leaf], t[corenn.tensor(index)]
        return [leaf], F.pad(t.reshape(1, *shape), (1, 1), mode=mode)

    text = f"mode={mode}" if kind == "pad" else f"dim={dim} index={index.tolist()}"
    return f"{kind} x{x.shape} {text} {dtype.__name__} {layout}", run, 1 + _magnitude(x), {"x": x}


@st.composite
def optim_case(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    kind = draw(st.sampled_from(["sgd", "adam", "adamw"]))
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 5)))
    p = draw(values(shape, dtype))
    g = draw(values(shape, dtype))
    layout = draw(st.sampled_from(LAYOUTS))
    options = ({"momentum": draw(st.sampled_from([0.0, 0.9])), "nesterov": False} if kind == "sgd"
               else {"amsgrad": draw(st.booleans())})

    def run():
        param = corenn.nn.Parameter(corenn.tensor(p))
        _, grad = tensor(g, layout)
        param.grad = grad
        opt = {"sgd": corenn.optim.SGD, "adam": corenn.optim.Adam, "adamw": corenn.optim.AdamW}[kind](
            [param], lr=0.1, **options)
        opt.step()
        opt.step()
        return [], param.detach()

    return (f"{kind} p{shape} {options} {dtype.__name__} grad layout {layout}", run, 1 + _magnitude(p) + _magnitude(g),
            {"p": p, "g": g})


def _magnitude(array):
    if array is None:
        return 0.0
    finite = np.abs(array[np.isfinite(array)])
    return float(finite.max()) if finite.size else 0.0


CASES = st.one_of(linear_case(), conv_case(), pool_case(), norm_case(), softmax_case(), scatter_case(),
                  optim_case())


# ---------------------------------------------------------------------------------------------------------
# comparing the plugin with the core
# ---------------------------------------------------------------------------------------------------------

def _outcome(run):
    try:
        leaves, out = run()
        return _outputs_and_grads(leaves, out, grad_seed=1)
    except ALLOWED as error:
        return type(error)


def _same(got, expected, scale, what):
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, expected, err_msg=what)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"{what}: nan at other places")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected), err_msg=f"{what}: +inf at other places")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected), err_msg=f"{what}: -inf at other places")
    finite = np.isfinite(got)
    rtol = 2e-3 if got.dtype == np.float32 else 1e-9
    # Sums of products round differently in another order: up to rtol times the operands' magnitude.
    np.testing.assert_allclose(got[finite], expected[finite], rtol=rtol, atol=rtol * scale, err_msg=what)


def _show(arrays):
    """The drawn arrays, in full when small: what a failure report needs to reproduce the case."""
    return "; ".join(f"{name}={np.array2string(a, threshold=64, precision=9)}" for name, a in arrays.items()
                     if a is not None)


def compare(description, run, scale, arrays):
    description = f"{description} with {_show(arrays)}"
    LOG.case(description)
    got = _outcome(run)
    with corenn_numba.disabled():
        expected = _outcome(run)
    if isinstance(expected, type) or isinstance(got, type):
        assert got == expected, f"{description}: plugin gives {got}, core {expected}"
        return
    (outs, grads), (expected_outs, expected_grads) = got, expected
    # ``scale``: one magnitude for everything, or {"out": one per output, "grad": one for the gradients}
    scales = scale if isinstance(scale, dict) else {"out": [scale] * len(outs), "grad": scale}
    for k, (a, b) in enumerate(zip(outs, expected_outs)):
        _same(a, b, scales["out"][k], f"{description}: output {k}")
    if grads is not None and expected_grads is not None:
        for k, (a, b) in enumerate(zip(grads, expected_grads)):
            assert (a is None) == (b is None), f"{description}: gradient {k} missing on one side"
            if a is not None:
                _same(a, b, scales["grad"], f"{description}: gradient {k}")


def check_ops(case):
    compare(*case)


# ---------------------------------------------------------------------------------------------------------
# the compiled entry points, called directly with one argument mutated
# ---------------------------------------------------------------------------------------------------------

RECORDED: dict = {}


def record_entry_calls():
    """Run each overridden op family once and keep the arguments of the first call of every entry point."""
    modules = [__import__(f"corenn_numba.{name}", fromlist=["_"]) for name in
               ("_gemm_jit", "_conv_jit", "_nn_jit", "_norms_jit", "_pooling_jit", "_scatter_jit", "_optim_jit",
                "_spin_jit", "_winograd_jit")]
    originals = []
    for module in modules:
        for name, entry in list(vars(module).items()):
            if callable(entry) and hasattr(entry, "compiled") and hasattr(entry, "check"):
                def recorder(*args, _entry=entry, _key=f"{module.__name__.split('.')[-1]}.{name}"):
                    RECORDED.setdefault(_key, (_entry, tuple(a.copy() if isinstance(a, np.ndarray) else a
                                                             for a in args)))
                    return _entry(*args)
                originals.append((module, name, entry))
                setattr(module, name, recorder)
    try:
        _exercise_every_family()
    finally:
        for module, name, entry in originals:
            setattr(module, name, entry)


def _exercise_every_family():
    rng = np.random.default_rng(0)
    for dtype in (np.float32,):
        def t(*shape):
            return corenn.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
        F.linear(t(9, 5), t(12, 5), t(12)).sum().backward()
        for stride in (1, 2):
            F.conv2d(t(2, 20, 6, 6), t(4, 20, 3, 3), t(4), stride=stride, padding=1).sum().backward()
            F.conv2d(t(2, 2, 6, 6), t(4, 2, 3, 3), t(4), stride=stride).sum().backward()
            F.conv2d(t(3, 1, 6, 6), t(4, 1, 3, 3), stride=stride).sum().backward()
            F.conv2d(t(2, 4, 6, 6), t(20, 4, 3, 3), stride=stride).sum().backward()
            F.conv_transpose2d(t(2, 3, 4, 4), t(3, 2, 3, 3), t(2), stride=stride).sum().backward()
        F.conv2d(t(2, 40, 7, 7), t(8, 40, 3, 3), padding=2).sum().backward()
        F.conv2d(t(1, 32, 5, 32), t(32, 32, 3, 3), t(32), padding=1).sum().backward()  # Winograd
        F.max_pool2d(t(2, 3, 6, 6), 2).sum().backward()
        F.max_pool2d(t(2, 3, 7, 7), 3, 2, 1).sum().backward()
        F.avg_pool2d(t(2, 3, 6, 6), 3, 2, 1).sum().backward()
        F.adaptive_avg_pool2d(t(2, 3, 6, 6), 4).sum().backward()
        F.layer_norm(t(3, 5), (5,), t(5), t(5)).sum().backward()
        F.group_norm(t(2, 4, 3), 2, t(4), t(4)).sum().backward()
        F.batch_norm(t(4, 3, 5), None, None, t(3), t(3), training=True).sum().backward()
        F.softmax(t(3, 4), -1).sum().backward()
        F.relu(t(3, 4)).sum().backward()
        F.cross_entropy(t(4, 5), corenn.tensor([0, 1, 4, 2])).backward()
        F.cross_entropy(t(2, 5, 3), corenn.tensor([[0, 1, 4], [2, 2, 0]])).backward()
        corenn.gather(t(3, 4), 1, corenn.tensor([[0, 1], [2, 3], [1, 1]])).sum().backward()
        corenn.index_select(t(4, 3), 0, corenn.tensor([0, 2, 2])).sum().backward()
        t(3, 4)[corenn.tensor([0, 2]), corenn.tensor([1, 1])].sum().backward()
        param = corenn.nn.Parameter(corenn.tensor(rng.standard_normal((4, 3)).astype(dtype)))
        param.grad = corenn.ones(4, 3)
        for opt in (corenn.optim.SGD([param], lr=0.1, momentum=0.9), corenn.optim.Adam([param], amsgrad=True)):
            opt.step()


@st.composite
def mutation(draw, args):
    """``args`` with one argument replaced by a hostile neighbour of it."""
    args = list(args)
    k = draw(st.integers(0, len(args) - 1))
    a = args[k]
    if isinstance(a, np.ndarray):
        kind = draw(st.sampled_from(["shorter", "longer", "dtype", "int", "transposed", "flipped", "list", "0-d",
                                     "readonly", "none"]))
        if kind == "shorter" and a.ndim and a.shape[-1]:
            a = np.ascontiguousarray(a[..., :-1])
        elif kind == "longer" and a.ndim:
            a = np.concatenate([a, a[..., :1] if a.shape[-1] else np.zeros(a.shape[:-1] + (1,), a.dtype)], -1)
        elif kind == "dtype":
            a = a.astype(np.float64 if a.dtype == np.float32 else np.float32)
        elif kind == "int":
            a = a.astype(np.int32)
        elif kind == "transposed" and a.ndim >= 2:
            a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
        elif kind == "flipped" and a.ndim:
            a = np.flip(a, -1)
        elif kind == "list":
            a = a.tolist()
        elif kind == "0-d":
            a = np.asarray(a.reshape(-1)[0] if a.size else 0.0)
        elif kind == "readonly":
            a = a.copy()
            a.flags.writeable = False
        elif kind == "none":
            a = None
    elif isinstance(a, (bool, np.bool_)):
        a = draw(st.sampled_from([1, None, "yes", not a]))
    elif isinstance(a, (int, np.integer)):
        a = draw(st.sampled_from([a + 1, a - 1, -1, 0, 2 ** 31, -(2 ** 40), float(a)]))
    elif isinstance(a, (float, np.floating)):
        a = draw(st.sampled_from([np.nan, -1.0, 1e308, 0, None]))
    elif isinstance(a, tuple):
        a = tuple(v + 1 for v in a) if draw(st.booleans()) else a[:-1]
    args[k] = a
    return k, tuple(args)


def check_entries(data):
    key = data.draw(st.sampled_from(sorted(RECORDED)))
    entry, args = RECORDED[key]
    k, mutated = data.draw(mutation(args))
    fresh = tuple(a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a for a in mutated)
    LOG.case(f"{key}: argument {k} -> {_describe(mutated[k])}")
    try:
        entry(*fresh)
    except (TypeError, ValueError, IndexError):
        pass


def _describe(value):
    if isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype} strides={value.strides} writeable={value.flags.writeable}"
    return repr(value)[:80]


def run_until(deadline, test, strategy, seed):
    """``test`` on examples of ``strategy`` in batches until ``deadline``; a failing batch shrinks its example."""
    batch = 0
    while time.monotonic() < deadline:
        run = settings(max_examples=10, deadline=None, database=None, phases=(Phase.generate, Phase.shrink),
                       suppress_health_check=list(HealthCheck))(given(strategy)(test))
        hypothesis.seed(seed * 100_003 + batch)(run)()
        batch += 1
    return batch


def main():
    global LOG
    seconds, seed, log_path = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    LOG = Log(log_path)
    start = time.monotonic()
    record_entry_calls()  # also compiles every kernel: the time budget starts after it
    LOG.case(json.dumps({"recorded": sorted(RECORDED)}))
    warm = time.monotonic()
    ops = run_until(warm + seconds * 2 / 3, check_ops, CASES, seed)
    entries = run_until(warm + seconds, check_entries, st.data(), seed)
    print(f"warm-up {warm - start:.1f} s; {ops} batches of op cases, {entries} of entry-point calls "
          f"in {time.monotonic() - warm:.1f} s; {len(RECORDED)} entry points recorded")


if __name__ == "__main__":
    main()
