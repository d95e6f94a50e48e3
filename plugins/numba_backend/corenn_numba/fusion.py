"""``corenn.compile(..., backend="numba")``: chains of pointwise ops, and a reduction at their end, as one loop.

The core's ``"replay"`` backend runs a captured program's kernels one by one, each a numpy call
with its own pass over memory and its own Python overhead. This backend rewrites the program
(``corenn.compiler.Program.fuse``) so that each *group* -- consecutive pointwise ops of one
shape and dtype, optionally closed by a full ``sum`` or ``mean`` -- runs as one generated numba
loop, forward, and one for backward:

- forward: one pass over the elements; every intermediate lives in a register. Only what
  anything outside the group reads is written to memory, plus, when a gradient is wanted, the
  outputs of the transcendental ops (exp, tanh, ...), which backward reads instead of
  computing them again;
- backward: one pass that recomputes the cheap intermediates (arithmetic) from the inputs and
  the saved values, and runs reverse mode per element, adjoints in registers.

numba's transcendental functions are scalar libm calls, while numpy's are vectorised: on large
arrays a fused ``sin`` can be slower than numpy's. So each group is timed against what the core's
``"replay"`` makes of it (the same chain as straight-line numpy code,
``corenn.compiler.pointwise.numpy_kernel``), forward and backward, on arrays of the captured
shapes, and the faster one runs (:func:`choose`): like the kernel overrides, this backend never
makes a program slower than the core by more than the noise of that measurement. The program's
``graph`` names each fused step: ``numba_fused_...`` for a loop, ``fused_...`` for numpy code.

The generated source of each group goes to a file under the plugin's cache folder, so numba's
own cache keeps its machine code across processes.
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import time
from typing import NamedTuple

import numpy as np

from corenn.compiler.pointwise import REDUCTIONS, find_groups, formula, grad_flow, numpy_kernel, render
from corenn.kernels import Op, detached_context

# ---------------------------------------------------------------------------------------------------------
# Generated code
# ---------------------------------------------------------------------------------------------------------

# float32 tanh as a rational function (Eigen's): libm's tanhf is a scalar call that costs more than all the
# arithmetic of a typical chain, while this vectorises. At most 6 ulp from the exact value on random normal inputs
# (numpy's vectorised tanh: 1.4); NaN passes through; beyond +-7.9 the result rounds to +-1 either way.
TANH_FLOAT32 = (
    "@numba.njit(error_model='numpy')  # LLVM inlines it; numba's own inlining compiles far slower",
    "def tanh32(x):",
    "    c = T(7.90531110763549805)",
    "    x = c if x > c else x",
    "    x = -c if x < -c else x",
    "    x2 = x * x",
    "    p = x2 * T(-2.76076847742355e-16) + T(2.00018790482477e-13)",
    "    p = x2 * p + T(-8.60467152213735e-11)",
    "    p = x2 * p + T(5.12229709037114e-08)",
    "    p = x2 * p + T(1.48572235717979e-05)",
    "    p = x2 * p + T(6.37261928875436e-04)",
    "    p = x2 * p + T(4.89352455891786e-03)",
    "    q = x2 * T(1.19825839466702e-06) + T(1.18534705686654e-04)",
    "    q = x2 * q + T(2.26843463243900e-03)",
    "    q = x2 * q + T(4.89352518554385e-03)",
    "    # below 4e-4, tanh(x) rounds to x; the quotient would lose bits on subnormal x",
    "    return x if abs(x) < T(0.0004) else x * p / q",
)


class Plan(NamedTuple):
    """A group turned into code: which arrays each generated function takes."""

    source: str
    inputs: tuple         # the slots of the arrays the loops read
    positions: tuple      # where each of them is among the fused kernel's inputs (the rest are constants, inlined)
    arity: int            # how many inputs the fused kernel takes
    shapes: tuple         # per array: () for a 0-d one read once, None for one of the group's shape
    outputs: tuple        # its output slots
    saved: tuple          # slots of transcendental values kept for backward
    needs_grad: tuple     # per input: whether its gradient is computed
    reduction: str | None  # "sum" / "mean" when the group ends in one (its output is the last of `outputs`)


def plan(members, kernel_inputs, outputs) -> Plan:
    """The source of ``forward`` and ``backward`` for a group (see the module docstring)."""
    dtype = members[0].dtype
    array_slots = {slot for m in members for kind, slot in m.operands if kind != "const"}
    scalar_slots = {slot for m in members for kind, slot in m.operands if kind == "scalar"}
    positions = tuple(k for k, slot in enumerate(kernel_inputs) if slot in array_slots)
    inputs = tuple(kernel_inputs[k] for k in positions)
    needs = grad_flow(members, inputs)  # slot -> whether a gradient flows into it
    needs_grad = tuple(needs[slot] for slot in inputs)
    records = any(needs_grad)
    ends_in_reduction = members[-1].step.op in REDUCTIONS
    pointwise = members[:-1] if ends_in_reduction else members
    # a reduction whose result nothing reads is not computed
    reduction = members[-1].step.op if ends_in_reduction and members[-1].step.outputs[0] in outputs else None
    # Values backward reads from memory: libm calls (a vectorised tanh32 is cheaper to compute again than to store).
    saved = tuple(m.step.outputs[0] for m in pointwise if records and formula(m).transcendental
                  and not (m.step.op == "tanh" and dtype == np.float32))

    def value_of(m):
        if m.step.op == "tanh" and dtype == np.float32:
            return render("tanh32({a})", m)
        return render(formula(m).value, m)

    head = ["import numpy as np", "import numba", f"T = np.{dtype.name}", "", *(TANH_FLOAT32 if dtype == np.float32 else ()),
            ""]
    # -- forward --
    args = [f"in{k}" for k in range(len(inputs))] + [f"out{k}" for k in range(len(outputs))] + \
           [f"save{k}" for k in range(len(saved))]
    if reduction:
        args.append("reduced")  # the reduction's operand per element, summed after the loop: an accumulator
        # inside the loop would keep it from vectorising (float addition is not associative)
    full = next(k for k, slot in enumerate(inputs) if slot not in scalar_slots)
    loads_before = [f"    v{slot} = in{k}[0]" for k, slot in enumerate(inputs) if slot in scalar_slots]
    loads = [f"        v{slot} = in{k}[i]" for k, slot in enumerate(inputs) if slot not in scalar_slots]
    lines = [f"def forward({', '.join(args)}):", f"    n = in{full}.shape[0]", *loads_before,
             "    for i in range(n):", *loads]
    for m in pointwise:
        lines.append(f"        v{m.step.outputs[0]} = T({value_of(m)})")
    pointwise_outputs = [slot for slot in outputs if not (reduction and slot == members[-1].step.outputs[0])]
    lines += [f"        out{outputs.index(slot)}[i] = v{slot}" for slot in pointwise_outputs]
    lines += [f"        save{k}[i] = v{slot}" for k, slot in enumerate(saved)]
    if reduction:
        lines.append(f"        reduced[i] = v{members[-1].operands[0][1]}")
        lines += ["    acc = 0.0", "    for i in range(n):", "        acc += reduced[i]"]
        total = "acc" if reduction == "sum" else "acc / n"
        lines.append(f"    out{outputs.index(members[-1].step.outputs[0])}[0] = T({total})")
    forward = lines
    # -- backward --
    args = [f"in{k}" for k in range(len(inputs))] + [f"save{k}" for k in range(len(saved))] + \
           [f"gout{k}" for k in range(len(outputs))] + [f"gin{k}" for k, want in enumerate(needs_grad) if want]
    lines = [f"def backward({', '.join(args)}):", f"    n = in{full}.shape[0]", *loads_before]
    if reduction:
        scale = "" if reduction == "sum" else " / T(n)"
        lines.append(f"    g_reduced = gout{outputs.index(members[-1].step.outputs[0])}[0]{scale}")
    lines.append("    for i in range(n):")
    lines += loads
    for m in pointwise:
        slot = m.step.outputs[0]
        if slot in saved:
            lines.append(f"        v{slot} = save{saved.index(slot)}[i]")
        else:
            lines.append(f"        v{slot} = T({value_of(m)})")
    adjoint_slots = [slot for slot, want in needs.items() if want]
    lines += [f"        a{slot} = T(0)" for slot in adjoint_slots]
    lines += [f"        a{slot} += gout{outputs.index(slot)}[i]" for slot in pointwise_outputs if needs[slot]]
    if reduction and members[-1].operands[0][0] == "slot" and needs.get(members[-1].operands[0][1]):
        lines.append(f"        a{members[-1].operands[0][1]} += g_reduced")
    for m in reversed(pointwise):
        out = m.step.outputs[0]
        if not needs[out]:
            continue
        for position, (kind, slot) in enumerate(m.operands):
            if kind == "slot" and needs.get(slot):
                adjoint = render(formula(m).adjoints[position], m, g=f"a{out}")
                lines.append(f"        a{slot} += T({adjoint})")
    grads = [k for k, want in enumerate(needs_grad) if want]
    lines += [f"        gin{k}[i] = a{inputs[k]}" for k in grads]
    source = "\n".join(head + forward + [""] + lines) + "\n"
    return Plan(source, inputs, positions, len(kernel_inputs), tuple(() if slot in scalar_slots else None
                                                                      for slot in inputs),
                tuple(outputs), saved, needs_grad, reduction)


def _signature(count: int, dtype) -> str:
    kind = "float32" if dtype == np.float32 else "float64"
    return f"void({', '.join([f'{kind}[::1]'] * count)})"


def compile_plan(p: Plan, dtype):
    """The plan's ``(forward, backward)`` as compiled numba functions, cached on disk by their source."""
    import numba

    from corenn_numba._base import compiled_code_cache
    from corenn_numba.calibration import cache_dir
    digest = hashlib.sha256(p.source.encode()).hexdigest()[:20]
    folder = cache_dir() / "fused"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fused_{digest}.py"
    if not path.exists():  # written whole, then renamed: another process may be loading it
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(p.source)
        os.replace(partial, path)
    spec = importlib.util.spec_from_file_location(f"corenn_numba_fused_{digest}", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        # numba's cache finds the functions' globals again by importing their module by name
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    options = dict(error_model="numpy", cache=True, nogil=True)
    with compiled_code_cache():
        forward = numba.njit(_signature(len(p.inputs) + len(p.outputs) + len(p.saved) + (p.reduction is not None),
                                        dtype), **options)(
            module.forward)
        backward = numba.njit(_signature(len(p.inputs) + len(p.saved) + len(p.outputs) + sum(p.needs_grad), dtype),
                              **options)(module.backward)
    return forward, backward


def make_kernel(p: Plan, shape, dtype, output_shapes, forward_loop, backward_loop) -> type:
    """A :class:`corenn.kernels.Op` running the group: shapes and dtypes checked before the loops run."""
    num_outputs = len(p.outputs)
    positions = p.positions
    expected_shapes = [shape if s is None else s for s in p.shapes]
    saved_count = len(p.saved)
    reduces = p.reduction is not None
    needs_grad = p.needs_grad

    class FusedPointwise(Op):
        grad_fn_name = "FusedPointwiseBackward"

        @staticmethod
        def forward(ctx, *inputs):
            if len(inputs) != p.arity:
                raise TypeError(f"fused kernel: takes {p.arity} inputs, got {len(inputs)}")
            arrays = [inputs[k] for k in positions]  # constants are inlined in the loops
            for position, a, expected in zip(positions, arrays, expected_shapes):
                if a.__class__ is not np.ndarray or a.shape != expected or a.dtype != dtype:
                    raise ValueError(f"fused kernel: input {position} is {getattr(a, 'dtype', type(a).__name__)} "
                                     f"{getattr(a, 'shape', '')}, captured {dtype} {expected}")
            flat = [a.ravel() for a in arrays]
            outs = [np.empty(s, dtype) for s in output_shapes]
            saves = [np.empty(math.prod(shape), dtype) for _ in range(saved_count + reduces)]
            forward_loop(*flat, *[o.reshape(-1) for o in outs], *saves)
            if reduces:
                saves.pop()
            ctx.save_for_backward(*flat, *saves)
            return outs[0] if num_outputs == 1 else tuple(outs)

        @staticmethod
        def backward(ctx, grad):
            grads = (grad,) if num_outputs == 1 else grad
            grads = [np.zeros(s, dtype) if g is None else np.ascontiguousarray(g, dtype) for g, s in
                     zip(grads, output_shapes)]
            wanted = ctx.needs_input_grad
            results = [np.empty(math.prod(shape), dtype) for want in needs_grad if want]
            backward_loop(*ctx.saved, *[g.reshape(-1) for g in grads], *results)
            computed = iter(results)
            per_input = [None] * p.arity
            for k, want in zip(positions, needs_grad):
                if want:
                    grad_input = next(computed)
                    if wanted[k]:
                        per_input[k] = grad_input.reshape(shape)
            return tuple(per_input)

    FusedPointwise.num_outputs = num_outputs
    return FusedPointwise


# ---------------------------------------------------------------------------------------------------------
# Measured choice, and the backend
# ---------------------------------------------------------------------------------------------------------

def _best_of(run, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _sample(shape, dtype, rng):
    # Positive values away from 0: every fusable op (log, sqrt, div) is finite on them, so timing sees no NaN path.
    return (rng.random(shape) + 0.5).astype(dtype)


def choose(loop_kernel, chain_kernel, p: Plan, shape, dtype, rng=None) -> bool:
    """True when the numba loop beats the core's numpy chain, forward and backward, on the captured shapes."""
    rng = rng or np.random.default_rng(0)
    inputs = [None] * p.arity
    for k, s in zip(p.positions, p.shapes):
        inputs[k] = _sample(shape if s is None else s, dtype, rng)
    wanted = tuple(k in p.positions and p.needs_grad[p.positions.index(k)] for k in range(p.arity))
    records = any(wanted)

    def timed(kernel):
        def run():
            ctx = detached_context(kernel, np, wanted)
            out = kernel.forward(ctx, *inputs)
            if records:
                outs = (out,) if kernel.num_outputs == 1 else out
                grads = tuple(np.ones_like(o) for o in outs)
                ctx.backward(ctx, grads[0] if kernel.num_outputs == 1 else grads)
        run()
        return _best_of(run)

    return timed(loop_kernel) < timed(chain_kernel)


def vectorises(members) -> bool:
    """True when no member is a libm call: the loop then vectorises, and never loses to numpy's separate passes."""
    return all(m.step.op in REDUCTIONS or not formula(m).transcendental or (m.step.op == "tanh" and
               m.dtype == np.float32) for m in members)


def numba_backend(program):
    """``corenn.compile(backend="numba")``: each pointwise chain as a numba loop, or as the core's numpy chain.

    Which one, as corenn-numba's kernel choices say (``CORENN_NUMBA_CHOOSE``, docs/numba.md):
    ``measure`` times both (:func:`choose`); ``kernel`` always takes the loop, ``core`` never;
    ``cached``, where nothing may be timed while the program runs, takes loops that vectorise.
    """
    from corenn_numba import calibration
    mode = calibration.mode()
    for members in reversed(find_groups(program)):  # from the end: earlier steps keep their indices
        def build(inputs, outputs, members=members, program=program):
            shape, dtype = members[0].shape, members[0].dtype
            output_shapes = [program.slot_info(slot).shape for slot in outputs]
            chain_kernel = numpy_kernel(members, inputs, outputs, output_shapes)
            if mode == "core" or (mode == "cached" and not vectorises(members)):
                return chain_kernel
            p = plan(members, inputs, outputs)
            forward_loop, backward_loop = compile_plan(p, dtype)
            loop_kernel = make_kernel(p, shape, dtype, output_shapes, forward_loop, backward_loop)
            loop_kernel.__name__ = "numba_" + chain_kernel.__name__
            if mode == "measure" and not choose(loop_kernel, chain_kernel, p, shape, dtype):
                return chain_kernel
            return loop_kernel

        program = program.fuse([m.step.index for m in members], build)
    return program.replay
