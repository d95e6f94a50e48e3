"""Global module hooks (for every module at once) and the machinery behind full backward hooks.

Global hooks run before a module's own hooks of the same kind; each ``register_*``
returns a :class:`~corenn.utils.hooks.RemovableHandle` (also a context manager).

Example::

    >>> from corenn.nn import module_hooks
    >>> seen = []
    >>> with module_hooks.register_module_forward_hook(lambda m, args, out: seen.append(type(m).__name__)):
    ...     nn.Sequential(nn.Identity())(corenn.zeros(1))
    >>> seen
    ['Identity', 'Sequential']
"""
from __future__ import annotations

import warnings
from collections import OrderedDict

from corenn.autograd import node as _node
from corenn.autograd.node import Node
from corenn.utils.hooks import RemovableHandle

__all__ = ["register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_buffer_registration_hook", "register_module_parameter_registration_hook",
           "register_module_module_registration_hook", "BackwardHook"]

# hook id -> hook; kept as module-level dicts so Module.__call__ can test them for emptiness cheaply.
_global_forward_pre_hooks: OrderedDict = OrderedDict()
_global_forward_hooks: OrderedDict = OrderedDict()
_global_forward_hooks_with_kwargs: OrderedDict = OrderedDict()
_global_forward_hooks_always_called: OrderedDict = OrderedDict()
_global_backward_pre_hooks: OrderedDict = OrderedDict()
_global_backward_hooks: OrderedDict = OrderedDict()
_global_buffer_registration_hooks: OrderedDict = OrderedDict()
_global_parameter_registration_hooks: OrderedDict = OrderedDict()
_global_module_registration_hooks: OrderedDict = OrderedDict()


def _add(hooks: OrderedDict, hook, *, extra=()) -> RemovableHandle:
    if not callable(hook):
        raise TypeError(f"hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(hooks, extra_dicts=extra)
    hooks[handle.id] = hook
    return handle


def register_module_forward_pre_hook(hook) -> RemovableHandle:
    """Run ``hook(module, args)`` before every module's ``forward``; a non-None result replaces ``args``.

    Example::

        >>> h = register_module_forward_pre_hook(lambda m, args: print(type(m).__name__))
        >>> h.remove()
    """
    return _add(_global_forward_pre_hooks, hook)


def register_module_forward_hook(hook, *, with_kwargs: bool = False, always_call: bool = False) -> RemovableHandle:
    """Run ``hook(module, args, output)`` after every module's ``forward``; a non-None result replaces ``output``.

    ``with_kwargs=True`` calls ``hook(module, args, kwargs, output)``; ``always_call=True``
    runs the hook even when ``forward`` raises.

    Example::

        >>> h = register_module_forward_hook(lambda m, args, out: out * 2)   # doubles every module's output
        >>> h.remove()
    """
    handle = _add(_global_forward_hooks, hook,
                  extra=(_global_forward_hooks_with_kwargs, _global_forward_hooks_always_called))
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook) -> RemovableHandle:
    """Run ``hook(module, grad_output)`` when any module's output gradients arrive; may return new ``grad_output``.

    Example::

        >>> h = register_module_full_backward_pre_hook(lambda m, grad_output: None)
        >>> h.remove()
    """
    return _add(_global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook) -> RemovableHandle:
    """Run ``hook(module, grad_input, grad_output)`` after any module's input gradients are computed.

    A non-None result replaces ``grad_input`` (one entry per positional input).

    Example::

        >>> h = register_module_full_backward_hook(lambda m, gi, go: print(type(m).__name__))
        >>> h.remove()
    """
    return _add(_global_backward_hooks, hook)


def register_module_buffer_registration_hook(hook) -> RemovableHandle:
    """Run ``hook(module, name, buffer)`` whenever any module registers a buffer; a result replaces the buffer.

    Example::

        >>> h = register_module_buffer_registration_hook(lambda m, name, b: None)
        >>> h.remove()
    """
    return _add(_global_buffer_registration_hooks, hook)


def register_module_parameter_registration_hook(hook) -> RemovableHandle:
    """Run ``hook(module, name, param)`` whenever any module registers a parameter; a result replaces it.

    Example::

        >>> h = register_module_parameter_registration_hook(lambda m, name, p: None)
        >>> h.remove()
    """
    return _add(_global_parameter_registration_hooks, hook)


def register_module_module_registration_hook(hook) -> RemovableHandle:
    """Run ``hook(module, name, submodule)`` whenever any module registers a submodule; a result replaces it.

    Example::

        >>> h = register_module_module_registration_hook(lambda m, name, sub: None)
        >>> h.remove()
    """
    return _add(_global_module_registration_hooks, hook)


# ---------------------------------------------------------------------------------------------------------
# Full backward hooks
# ---------------------------------------------------------------------------------------------------------

class BackwardHookFunctionBackward(Node):
    """Identity node over a module call's tensor inputs (or outputs).

    Gradients pass through unchanged; the node exists so that hooks registered on it
    see exactly the gradients of this module call's inputs (or outputs), like
    PyTorch's ``BackwardHookFunction``.
    """

    grad_fn_name = "BackwardHookFunctionBackward"

    def __init__(self, n):
        self.num_outputs = n

    @staticmethod
    def backward(ctx, grad_outputs):
        # Called by the engine as ``fn.backward(fn, grad_outputs)``, like an Op kernel's backward.
        if ctx.num_outputs == 1:
            return (grad_outputs,)
        return tuple(grad_outputs)


def _identity_through_node(tensors):
    """New tensors sharing the arrays of ``tensors``, all outputs of one identity node."""
    node = _node.attach(BackwardHookFunctionBackward(len(tensors)), tensors)
    outputs = []
    for i, t in enumerate(tensors):
        differentiable = t._requires_grad and t.dtype.is_floating_point
        outputs.append(_node._make(t._data, t._device, node if differentiable else None, i))
    return node, outputs


class BackwardHook:
    """Runs a module's full backward (pre) hooks for one call of the module.

    ``setup_input_hook`` routes the tensor inputs through an identity node whose
    post-hook sees (and may replace) ``grad_input``; ``setup_output_hook`` does the
    same on the outputs, where a hook captures ``grad_output`` and runs the backward
    pre-hooks. Mirrors ``torch.utils.hooks.BackwardHook``.
    """

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None

    @staticmethod
    def _pack_with_none(indices, values, size):
        packed = [None] * size
        for index, value in zip(indices, values):
            packed[index] = value
        return tuple(packed)

    @staticmethod
    def _unpack_none(indices, values):
        return tuple(values[index] for index in indices)

    def _apply_on_tensors(self, attach, args):
        Tensor = _node._Tensor
        indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in indices]
        if not (_node.grad_mode.enabled and any(t._requires_grad for t in tensors)):
            return args, None
        node, new_tensors = _identity_through_node(tensors)
        attach(node)
        args = list(args)
        for i, t in zip(indices, new_tensors):
            args[i] = t
        return tuple(args), indices

    def setup_input_hook(self, args):
        def attach(node):
            node.register_hook(self._input_hook)
        result, indices = self._apply_on_tensors(attach, args)
        self.n_inputs = len(args)
        self.input_tensors_index = indices
        return result

    def _input_hook(self, grad_input, _grad_output):
        if self.grad_outputs is None:
            # The gradient reached the inputs without passing through this call's outputs.
            return None
        result = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, result, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(result):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(out)}, but "
                                   f"expected {len(result)}")
            result = tuple(out)
        self.grad_outputs = None
        return self._unpack_none(self.input_tensors_index, result)

    def setup_output_hook(self, output):
        def attach(node):
            node.register_hook(self._output_hook)
        is_tuple = isinstance(output, tuple)
        outputs = output if is_tuple else (output,)
        result, indices = self._apply_on_tensors(attach, outputs)
        self.n_outputs = len(outputs)
        self.output_tensors_index = indices
        return result if is_tuple else result[0]

    def _output_hook(self, _grad_input, grad_output):
        self.grad_outputs = self._pack_with_none(self.output_tensors_index, grad_output, self.n_outputs)
        for hook in self.user_pre_hooks:
            out = hook(self.module, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(self.grad_outputs):
                raise RuntimeError(f"Backward pre hook returned an invalid number of grad_output, got {len(out)}, "
                                   f"but expected {len(self.grad_outputs)}")
            self.grad_outputs = tuple(out)
        local_grad_outputs = self.grad_outputs
        if self.input_tensors_index is None:
            # No input requires grad: the input-side hook never runs, so call the user hooks here.
            grad_inputs = self._pack_with_none([], [], self.n_inputs)
            if self.user_hooks:
                warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                              "outputs since no inputs require gradients. See the docs of "
                              "Module.register_full_backward_hook for more details.", UserWarning, stacklevel=2)
            for hook in self.user_hooks:
                out = hook(self.module, grad_inputs, self.grad_outputs)
                if out is not None and not (isinstance(out, tuple) and all(g is None for g in out)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                       "return None or None for all gradients.")
            self.grad_outputs = None
        return self._unpack_none(self.output_tensors_index, local_grad_outputs)


def _warn_bad_output(output):
    warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of Tensors but "
                  f"received {type(output)}", stacklevel=3)
