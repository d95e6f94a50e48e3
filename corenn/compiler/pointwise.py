"""Pointwise chains in a captured program: which kernel steps can run as one, and how each op differentiates.

Shared by the compile backends that fuse: the core's ``"replay"`` (:func:`numpy_backend`, straight-line
numpy code for each chain, forward and backward, instead of one kernel call and one autograd node per
op) and corenn-numba's ``"numba"`` (one generated loop per chain). ``POINTWISE`` holds each op's value
and the adjoints of its inputs as expression templates that read the same on scalars (numba) and,
with the ``array_*`` spellings where they differ, on whole arrays (numpy): the forward and backward
of each op side by side, as in ``corenn/ops``.
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np

__all__ = ["POINTWISE", "REDUCTIONS", "FLOATS", "MIN_GROUP", "Pointwise", "Member", "member", "formula",
           "find_groups", "grad_flow", "render", "literal", "numpy_source", "numpy_kernel", "numpy_backend", "chain_name"]

MIN_GROUP = 2  # a single op gains nothing from fusion


class Pointwise(NamedTuple):
    """How one op reads in generated code: its value, and its inputs' adjoints given the output's ``{g}``.

    Placeholders: ``{a}``, ``{b}`` (the inputs), ``{out}``, ``{g}``, ``{alpha}``, and the typed
    constants ``{zero}``, ``{one}``, ``{two}``, ``{half}``. ``transcendental`` ops are libm calls:
    their outputs are saved for backward rather than computed twice.
    """

    value: str
    adjoints: tuple
    transcendental: bool = False
    array_value: str | None = None     # where whole arrays need another spelling (eager's own formula)
    array_adjoints: tuple | None = None

    def value_on(self, arrays: bool) -> str:
        return self.array_value if arrays and self.array_value is not None else self.value

    def adjoints_on(self, arrays: bool) -> tuple:
        return self.array_adjoints if arrays and self.array_adjoints is not None else self.adjoints


POINTWISE = {
    "add": Pointwise("{a} + {b}", ("{g}", "{g}")),
    "sub": Pointwise("{a} - {b}", ("{g}", "-{g}")),
    "add_alpha": Pointwise("{a} + {alpha} * {b}", ("{g}", "{g} * {alpha}")),
    "sub_alpha": Pointwise("{a} - {alpha} * {b}", ("{g}", "-{g} * {alpha}")),
    "mul": Pointwise("{a} * {b}", ("{g} * {b}", "{g} * {a}")),
    "div": Pointwise("{a} / {b}", ("{g} / {b}", "-{g} * {a} / ({b} * {b})")),
    "neg": Pointwise("-{a}", ("-{g}",)),
    "square": Pointwise("{a} * {a}", ("{two} * {g} * {a}",)),
    "reciprocal": Pointwise("{one} / {a}", ("-{g} * {out} * {out}",)),
    "relu": Pointwise("np.maximum({a}, {zero})", ("{g} if {out} > {zero} else {zero}",),
                      array_adjoints=("{g} * ({out} > {zero})",)),
    "abs": Pointwise("np.abs({a})", ("{g} * np.sign({a})",)),
    "sqrt": Pointwise("np.sqrt({a})", ("{g} / ({two} * {out})",)),
    "rsqrt": Pointwise("{one} / np.sqrt({a})", ("{g} * -{half} * {out} * {out} * {out}",)),
    "exp": Pointwise("np.exp({a})", ("{g} * {out}",), transcendental=True),
    "log": Pointwise("np.log({a})", ("{g} / {a}",), transcendental=True),
    "sin": Pointwise("np.sin({a})", ("{g} * np.cos({a})",), transcendental=True),
    "cos": Pointwise("np.cos({a})", ("-{g} * np.sin({a})",), transcendental=True),
    "tanh": Pointwise("np.tanh({a})", ("{g} * ({one} - {out} * {out})",), transcendental=True),
    "sigmoid": Pointwise("{one} / ({one} + np.exp(-{a}))", ("{g} * {out} * ({one} - {out})",), transcendental=True,
                         array_value="np.exp(-np.logaddexp({zero}, -{a})).astype(T, copy=False)"),
}
REDUCTIONS = ("sum", "mean")  # over every element, closing a group
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# ---------------------------------------------------------------------------------------------------------
# Which steps fuse, and into which groups
# ---------------------------------------------------------------------------------------------------------

class Member(NamedTuple):
    """A kernel step that can join a group: its operands as slots or typed constants."""

    step: object          # the corenn.compiler.KernelStep
    shape: tuple          # the shape of its array operands (a reduction's input)
    dtype: np.dtype
    operands: tuple       # per input: ("slot", slot), ("scalar", slot) (a 0-d array, no gradient) or ("const", float)
    alpha: float


def _constant(info, dtype):
    """The float a constant input holds, when it mixes with ``dtype`` arrays without promoting them."""
    value = info.value
    if value.__class__ in (int, float):
        return float(value)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype:
        return float(value)
    return None


def formula(m: Member) -> Pointwise:
    """The member's entry in POINTWISE (``add`` with ``alpha`` other than 1 has its own)."""
    if m.alpha != 1:
        return POINTWISE[m.step.op + "_alpha"]
    return POINTWISE[m.step.op]


def member(program, step) -> Member | None:
    """``step`` as a group member, or None where it cannot fuse (op, params, dtype, shape)."""
    if step.params_read_slots or len(step.outputs) != 1 or step.device.type != "cpu":
        return None
    reduction = step.op in REDUCTIONS
    if step.op not in POINTWISE and not reduction:
        return None
    alpha = 1.0
    params = dict(step.params)
    if reduction:
        if params.pop("axes", None) is not None or params.pop("keepdim", False) or params.pop("dtype", None) is not None:
            return None
    elif step.op in ("add", "sub"):
        alpha = params.pop("alpha", 1)
        if alpha.__class__ not in (int, float):
            return None
        alpha = float(alpha)
    if params:
        return None
    out = program.slot_info(step.outputs[0])
    if out.dtype not in FLOATS or (reduction and out.shape != ()):
        return None
    shape = None
    operands = []
    wants = step.needs_input_grad or (False,) * len(step.inputs)
    for slot, wanted in zip(step.inputs, wants):
        info = program.slot_info(slot)
        if info.shape is not None and not info.is_constant:
            if info.dtype != out.dtype:
                return None
            if info.shape == () and out.shape != () and not wanted:  # `1 - y` wraps the 1 as a 0-d tensor
                operands.append(("scalar", slot))
                continue
            if shape is not None and info.shape != shape:
                return None
            shape = info.shape
            operands.append(("slot", slot))
            continue
        value = _constant(info, out.dtype)
        if value is None:
            return None
        operands.append(("const", value))
    if shape is None or (not reduction and shape != out.shape) or math.prod(shape) == 0:
        return None
    return Member(step, shape, out.dtype, tuple(operands), alpha)


def find_groups(program) -> list:
    """Lists of members, each a chain that can run as one loop: same shape and dtype, in program order.

    A group ends at a reduction (its output has another shape), at a step that cannot be moved
    over (``program.barriers()``), or when a step that stays outside reads one of its values.
    """
    barriers = set(program.barriers())
    groups, current, produced = [], [], set()

    def close():
        if len(current) >= MIN_GROUP:
            groups.append(list(current))
        current.clear()
        produced.clear()

    for step in program.kernel_steps():
        if current and any(b in barriers for b in range(current[-1].step.index, step.index)):
            close()
        m = member(program, step)
        reads_group = any(slot in produced for slot in step.inputs)
        if m is not None and current and (m.shape, m.dtype) == (current[0].shape, current[0].dtype) \
                and current[-1].step.op not in REDUCTIONS:
            current.append(m)
            produced.update(step.outputs)
            continue
        if reads_group or m is not None:
            close()
        if m is not None:
            current.append(m)
            produced.update(step.outputs)
    close()
    return groups


def grad_flow(members, inputs) -> dict:
    """slot -> whether a gradient flows into it: inputs whose gradient is wanted, and values computed from them."""
    needs = {slot: False for slot in inputs}
    for m in members:
        for (kind, slot), wanted in zip(m.operands, m.step.needs_input_grad or ()):
            if kind == "slot" and slot in needs and wanted:
                needs[slot] = True
    for m in members:
        needs[m.step.outputs[0]] = any(kind == "slot" and needs.get(slot) for kind, slot in m.operands)
    return needs


def literal(value: float) -> str:
    """``value`` as generated code: a number of the chain's dtype ``T`` (so float32 math stays float32)."""
    if math.isnan(value):
        return "T(np.nan)"
    if math.isinf(value):
        return "T(np.inf)" if value > 0 else "T(-np.inf)"
    return f"T({value!r})"


TYPED_CONSTANTS = {"zero": "T(0)", "one": "T(1)", "two": "T(2)", "half": "T(0.5)"}


def render(template: str, m: Member, **names) -> str:
    """A template of ``POINTWISE`` with the member's operands (``v<slot>`` variables or literals) filled in."""
    def operand(position):
        kind, value = m.operands[position]
        return literal(value) if kind == "const" else f"v{value}"
    filled = {"a": operand(0), "out": f"v{m.step.outputs[0]}", "alpha": literal(m.alpha), **TYPED_CONSTANTS,
              **names}
    if len(m.operands) > 1:
        filled["b"] = operand(1)
    return template.format(**filled)


# ---------------------------------------------------------------------------------------------------------
# The core's fusion: straight-line numpy code per chain ("replay")
# ---------------------------------------------------------------------------------------------------------

def numpy_source(members, kernel_inputs, outputs) -> str:
    """The source of ``forward(*inputs) -> (outputs, saved)`` and ``backward(*saved, *grads) -> grads``.

    Forward makes the same numpy calls as the kernels it replaces, in the same order, so its
    values are eager's bit for bit; backward applies each op's adjoint, summing where a value
    feeds several ops, as the engine would.
    """
    needs = grad_flow(members, kernel_inputs)
    shape = members[0].shape
    reduction = members[-1].step.op if members[-1].step.op in REDUCTIONS else None
    pointwise = members[:-1] if reduction else members
    # -- backward first: what it reads is what forward must keep
    adjoint = {}  # slot -> the variable holding its adjoint so far

    def add(slot, expression, lines):
        if slot in adjoint:
            lines.append(f"    a{slot} = a{slot} + {expression}")
        else:
            lines.append(f"    a{slot} = {expression}")
            adjoint[slot] = f"a{slot}"

    body = []
    for k, slot in enumerate(outputs):
        if needs.get(slot) and not (reduction and slot == members[-1].step.outputs[0]):
            add(slot, f"gout{k}", body)
    if reduction:
        reduced = members[-1].operands[0][1]
        if needs.get(reduced):
            k = outputs.index(members[-1].step.outputs[0]) if members[-1].step.outputs[0] in outputs else None
            if k is not None:
                scale = "" if reduction == "sum" else f" / T({math.prod(shape)})"
                add(reduced, f"np.full({shape!r}, gout{k}{scale}, T)", body)
    for m in reversed(pointwise):
        out = m.step.outputs[0]
        if out not in adjoint:
            continue
        for position, (kind, slot) in enumerate(m.operands):
            if kind == "slot" and needs.get(slot):
                add(slot, render(formula(m).adjoints_on(True)[position], m, g=f"a{out}"), body)
    results = [f"a{slot}" if needs.get(slot) and slot in adjoint else "None" for slot in kernel_inputs]
    used = sorted({int(slot) for line in body for slot in re.findall(r"\bv(\d+)\b", line)})
    saved = tuple(f"v{slot}" for slot in used)
    grads = [f"gout{k}" for k in range(len(outputs))]
    backward = [f"def backward({', '.join(list(saved) + grads)}):", *body,
                f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})"]
    # -- forward
    forward = [f"def forward({', '.join(f'in{k}' for k in range(len(kernel_inputs)))}):"]
    forward += [f"    v{slot} = in{k}" for k, slot in enumerate(kernel_inputs)]
    for m in pointwise:
        forward.append(f"    v{m.step.outputs[0]} = {render(formula(m).value_on(True), m)}")
    if reduction:
        forward.append(f"    v{members[-1].step.outputs[0]} = v{members[-1].operands[0][1]}.{reduction}()")
    forward.append(f"    return ({''.join(f'v{slot}, ' for slot in outputs)}), "
                   f"({''.join(f'{name}, ' for name in saved)})")
    return "\n".join(forward + [""] + backward) + "\n"


def numpy_kernel(members, kernel_inputs, outputs, output_shapes) -> type:
    """A kernel (``corenn.kernels.Op``) running :func:`numpy_source`'s code for one chain."""
    from corenn.autograd.node import Op
    dtype = members[0].dtype
    source = numpy_source(members, kernel_inputs, outputs)
    namespace = {"np": np, "T": dtype.type}
    exec(compile(source, f"<corenn.compile fused chain: {', '.join(m.step.op for m in members)}>", "exec"),
         namespace)
    forward_code, backward_code = namespace["forward"], namespace["backward"]
    num_outputs = len(outputs)

    class FusedChain(Op):
        grad_fn_name = "FusedChainBackward"

        @staticmethod
        def forward(ctx, *inputs):
            outs, saved = forward_code(*inputs)
            ctx.save_for_backward(*saved)
            return outs[0] if num_outputs == 1 else outs

        @staticmethod
        def backward(ctx, grad):
            grads = (grad,) if num_outputs == 1 else tuple(
                np.zeros(s, dtype) if g is None else g for g, s in zip(grad, output_shapes))
            return backward_code(*ctx.saved, *grads)

    FusedChain.num_outputs = num_outputs
    FusedChain.source = source
    FusedChain.__name__ = chain_name(members)  # what the program's graph calls the fused step
    return FusedChain


def chain_name(members) -> str:
    """``fused_sin_add``, ``fused_add_tanh_mul_etc``: the first ops of a chain."""
    return "fused_" + "_".join(m.step.op for m in members[:3]) + ("_etc" if len(members) > 3 else "")


def numpy_backend(program):
    """The core's ``"replay"``: the program with each pointwise chain as straight-line numpy code, replayed."""
    for members in reversed(find_groups(program)):  # from the end: earlier steps keep their indices
        def build(inputs, outputs, members=members, program=program):
            return numpy_kernel(members, inputs, outputs, [program.slot_info(slot).shape for slot in outputs])
        program = program.fuse([m.step.index for m in members], build)
    return program.replay
