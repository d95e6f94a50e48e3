"""User-defined differentiable functions: ``corenn.autograd.Function`` (mirrors ``torch.autograd.Function``).

Example::

    class Exp(corenn.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad_output):
            (y,) = ctx.saved_tensors
            return grad_output * y

    y = Exp.apply(x)
"""
from __future__ import annotations

from corenn.autograd import node as _node
from corenn.autograd.grad_mode import no_grad
from corenn.autograd.node import Node, _FREED


class FunctionCtx:
    """The ``ctx`` of a custom Function: what forward leaves for backward."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, _node._Tensor):
                raise TypeError(f"save_for_backward can only save tensors (or None), got {type(t).__name__}; "
                                "store other values as attributes of ctx")
        self.to_save = tensors

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = {id(t) for t in tensors}

    def mark_dirty(self, *tensors):
        self.dirty_tensors = tensors

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


class BackwardCFunction(FunctionCtx, Node):
    """The graph node of one call of a custom Function; it is also that call's ``ctx``."""

    def __init__(self, function_cls):
        self._function_cls = function_cls
        self.grad_fn_name = f"{function_cls.__name__}Backward"
        self.to_save = ()
        self.non_differentiable = set()
        self.materialize_grads = True

    @property
    def saved_tensors(self):
        if self.saved is _FREED:
            return self.saved_arrays  # raises the freed-graph error
        return self.to_save

    @staticmethod
    def backward(self, grad_outputs):
        """Called by the engine: wraps the gradients as tensors and runs the user's ``backward``."""
        many = self.num_outputs > 1
        grads = grad_outputs if many else (grad_outputs,)
        wrapped = []
        for g, shape_dtype in zip(grads, self.output_specs):
            if g is None:
                if self.materialize_grads:
                    shape, dtype, device = shape_dtype
                    g = device._xp.zeros(shape, dtype=dtype)
                else:
                    wrapped.append(None)
                    continue
            wrapped.append(_node._make(g, shape_dtype[2], None, 0))
        with no_grad():
            result = self._function_cls.backward(self, *wrapped)
        if not isinstance(result, tuple):
            result = (result,)
        n_inputs = len(self.next_edges)
        if len(result) < n_inputs:
            raise RuntimeError(f"function {self.grad_fn_name} returned an incorrect number of gradients "
                               f"(expected {n_inputs}, got {len(result)})")
        if len(result) > n_inputs:
            if any(r is not None for r in result[n_inputs:]):
                raise RuntimeError(f"function {self.grad_fn_name} returned an incorrect number of gradients "
                                   f"(expected {n_inputs}, got {len(result)})")
            result = result[:n_inputs]
        arrays = []
        for i, (g, edge) in enumerate(zip(result, self.next_edges)):
            if g is None or edge is None:
                arrays.append(None)
                continue
            if not isinstance(g, _node._Tensor):
                raise TypeError(f"function {self.grad_fn_name} returned a {type(g).__name__} as gradient {i}; "
                                "expected a Tensor or None")
            expected = self.input_shapes[i]
            if g._data.shape != expected:
                try:
                    from corenn.ops._kernel import sum_to_shape
                    arrays.append(sum_to_shape(g._data, expected))
                    continue
                except ValueError:
                    raise RuntimeError(f"Function {self.grad_fn_name} returned an invalid gradient at index {i} - got "
                                       f"{list(g.shape)} but expected shape compatible with {list(expected)}") from None
            arrays.append(g._data)
        return tuple(arrays)

    def __repr__(self):
        return f"<{self.grad_fn_name} object at {id(self):#x}>"


class _FunctionMeta(type):
    pass


class Function(metaclass=_FunctionMeta):
    """Base class for differentiable operations written by the user.

    Subclasses define ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` as
    static methods (or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``)
    and are called through ``apply``. Inside ``forward`` no graph is recorded;
    ``backward`` returns one gradient (or None) per input of ``forward``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    setup_context = None

    @classmethod
    def apply(cls, *args, **kwargs):
        Tensor = _node._Tensor
        ctx = BackwardCFunction(cls)
        # Edges before forward: ctx.needs_input_grad (Node's, read from the edges) is PyTorch's there too.
        _node.attach(ctx, args)
        with no_grad():
            if cls.setup_context is not None and cls.setup_context is not Function.setup_context:
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        records = _node.grad_mode.enabled and any(ctx.needs_input_grad)
        many = isinstance(output, tuple)
        outputs = output if many else (output,)
        if not records:
            return output
        ctx.input_shapes = tuple(a._data.shape if isinstance(a, Tensor) else None for a in args)
        ctx.num_outputs = len(outputs)
        ctx.output_specs = tuple((o._data.shape, o._data.dtype, o._device) if isinstance(o, Tensor) else None
                                 for o in outputs)
        ctx.saved = tuple(t._data for t in ctx.to_save if t is not None)  # lets the engine free them
        results = []
        inputs_by_id = {id(a) for a in args if isinstance(a, Tensor)}
        for i, o in enumerate(outputs):
            if not isinstance(o, Tensor):
                results.append(o)
                continue
            if id(o) in inputs_by_id and id(o) not in getattr(ctx, "dirty_ids", set()):
                o = o.detach()  # an input returned as-is becomes a new output of this node (PyTorch views it)
            if id(o) in ctx.non_differentiable or not o.dtype.is_floating_point:
                results.append(o)
                continue
            o._grad_fn, o._output_nr, o._requires_grad = ctx, i, True
            results.append(o)
        return tuple(results) if many else results[0]


class once_differentiable:
    """Decorator accepted for compatibility: corenn's custom backward always runs without a graph."""

    def __new__(cls, fn):
        return fn
