"""``Module``: the base class of every layer and model (mirrors ``torch.nn.Module``).

A module holds its state in three ordered dicts -- ``_parameters``, ``_buffers`` and
``_modules`` -- filled by plain assignment (``self.weight = nn.Parameter(...)``) or
the ``register_*`` methods. Everything else (``parameters()``, ``state_dict()``,
``to()``, ``train()``, hooks) walks those dicts.

Example::

    >>> import corenn
    >>> from corenn import nn
    >>> class MyLinear(nn.Module):
    ...     def __init__(self, in_features, out_features):
    ...         super().__init__()
    ...         self.weight = nn.Parameter(corenn.randn(in_features, out_features))
    ...         self.bias = nn.Parameter(corenn.randn(out_features))
    ...     def forward(self, input):
    ...         return (input @ self.weight) + self.bias
    >>> m = MyLinear(4, 3)
    >>> [name for name, _ in m.named_parameters()]
    ['weight', 'bias']
"""
from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Mapping
from typing import NamedTuple

from corenn import plugins as _plugins
from corenn.autograd.grad_mode import no_grad
from corenn.module import hooks as _hooks
from corenn.module.hooks import (BackwardHook, _global_backward_hooks, _global_backward_pre_hooks,
                                 _global_buffer_registration_hooks, _global_forward_hooks,
                                 _global_forward_hooks_always_called, _global_forward_hooks_with_kwargs,
                                 _global_forward_pre_hooks, _global_module_registration_hooks,
                                 _global_parameter_registration_hooks)
from corenn.module.parameter import Buffer, Parameter
from corenn.tensor.tensor import Tensor
from corenn.utils.hooks import RemovableHandle

__all__ = ["Module", "ComputedAttribute"]

_EXTRA_STATE_KEY_SUFFIX = "_extra_state"


class ComputedAttribute(NamedTuple):
    """What ``Module.computed_attribute(name)`` returns: the callables registered for a computed attribute."""

    compute: Callable
    assign: Callable | None


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys the module expected but did not get, and the reverse."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * spaces + line for line in lines)


def _typename(obj) -> str:
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(type(obj), "__module__", "builtins")
    name = type(obj).__qualname__
    return name if module in ("builtins", None) else f"{module}.{name}"


def _forward_unimplemented(self, *input):
    """The computation of the module; every subclass overrides this."""
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')


class Module:
    """Base class for all neural network modules; subclass it and define ``forward``.

    Assigning a :class:`Parameter`, a ``Module`` or (to a registered buffer name) a
    tensor as an attribute registers it. Calling the module runs its forward
    pre-hooks, ``forward``, forward hooks and sets up its backward hooks.

    Example::

        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.l0 = nn.Linear(4, 3)
        ...     def forward(self, x):
        ...         return self.l0(x).relu()
        >>> Net()
        Net(
          (l0): Linear(in_features=4, out_features=3, bias=True)
        )
    """

    #: version of this module's state-dict layout, saved in ``state_dict()._metadata``; bump when it changes
    _version: int = 1
    training: bool
    call_super_init: bool = False
    dump_patches: bool = False

    def __init__(self, *args, **kwargs) -> None:
        if self.call_super_init is False and (args or kwargs):
            if kwargs:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                                f"'{next(iter(kwargs))}'")
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument but {len(args) + 1} "
                            "were given")
        # Internals go through object.__setattr__: Module.__setattr__ would look them up while they don't exist yet.
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_backward_pre_hooks", OrderedDict())
        setattr_(self, "_backward_hooks", OrderedDict())
        setattr_(self, "_is_full_backward_hook", None)
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_forward_hooks_always_called", OrderedDict())
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        setattr_(self, "_state_dict_hooks", OrderedDict())
        setattr_(self, "_state_dict_pre_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_pre_hooks", OrderedDict())
        setattr_(self, "_load_state_dict_post_hooks", OrderedDict())
        # name -> (compute, assign): attributes computed from other state (register_computed_attribute)
        setattr_(self, "_computed_attributes", {})
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    forward = _forward_unimplemented

    # ------------------------------------------------------------------------------------------------
    # Registration
    # ------------------------------------------------------------------------------------------------

    def _check_new_name(self, kind: str, name, own: dict) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f"{kind} name can't contain \".\", got: {name}")
        if name == "":
            raise KeyError(f"{kind} name can't be empty string \"\"")
        if name in self.__dict__.get("_computed_attributes", ()):
            # Checked before hasattr, which would compute the value (a parametrization, a pruned weight).
            raise KeyError(f"attribute '{name}' already exists (a computed attribute; "
                           f"remove_computed_attribute('{name}') first)")
        if name not in own and hasattr(self, name):
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as a buffer: module state that is not learned (e.g. a running mean).

        Persistent buffers are saved in ``state_dict``; ``tensor=None`` reserves the name
        (nothing is saved for it until a tensor is assigned).

        Example::

            >>> m = nn.Module()
            >>> m.register_buffer("running_mean", corenn.zeros(3))
            >>> m.register_buffer("scratch", corenn.zeros(3), persistent=False)
            >>> list(m.state_dict())
            ['running_mean']
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name("buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(corenn Tensor or None required)")
        for hook in _global_buffer_registration_hooks.values():
            output = hook(self, name, tensor)
            if output is not None:
                tensor = output
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` under ``name``; ``None`` reserves the name (and keeps it out of ``state_dict``).

        Example::

            >>> m = nn.Module()
            >>> m.register_parameter("scale", nn.Parameter(corenn.ones(1)))
            >>> m.register_parameter("shift", None)
            >>> [n for n, _ in m.named_parameters()]
            ['scale']
        """
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name("parameter", name, self._parameters)
        if param is not None:
            if not isinstance(param, Parameter):
                raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                                "(corenn.nn.Parameter or None required)")
            if param._grad_fn is not None:
                raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                                 f"created explicitly. To express '{name}' as a function of another Tensor, compute "
                                 "the value in the forward() method.")
        for hook in _global_parameter_registration_hooks.values():
            output = hook(self, name, param)
            if output is not None:
                param = output
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` as a child named ``name`` (what ``self.name = module`` does).

        Example::

            >>> m = nn.Module()
            >>> m.add_module("body", nn.Identity())
            >>> [n for n, _ in m.named_children()]
            ['body']
        """
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if "_modules" not in self.__dict__:
            raise AttributeError("cannot assign module before Module.__init__() call")
        self._check_new_name("module", name, self._modules)
        for hook in _global_module_registration_hooks.values():
            output = hook(self, name, module)
            if output is not None:
                module = output
        self._modules[name] = module

    def register_module(self, name: str, module: "Module | None") -> None:
        """Alias for :meth:`add_module`.

        Example::

            >>> m = nn.Module(); m.register_module("head", nn.Identity())
        """
        self.add_module(name, module)

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` (``""`` is ``self``); AttributeError naming the missing step.

        Example::

            >>> net = nn.Sequential(nn.Sequential(nn.Linear(2, 2)))
            >>> net.get_submodule("0.0")
            Linear(in_features=2, out_features=2, bias=True)
        """
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def set_submodule(self, target: str, module: "Module", strict: bool = False) -> None:
        """Replace (or, unless ``strict``, add) the submodule at dotted path ``target``.

        Example::

            >>> net = nn.Sequential(nn.Linear(2, 2))
            >>> net.set_submodule("0", nn.Identity())
        """
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        *path, name = target.split(".")
        parent = self.get_submodule(".".join(path))
        if strict and not hasattr(parent, name):
            raise AttributeError(f"{parent._get_name()} has no attribute `{name}`")
        if hasattr(parent, name) and not isinstance(getattr(parent, name), Module):
            raise AttributeError(f"`{name}` is not an nn.Module")
        setattr(parent, name, module)

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target``, e.g. ``"net.l0.weight"``.

        Example::

            >>> nn.Sequential(nn.Linear(2, 3)).get_parameter("0.bias").shape
            corenn.Size([3])
        """
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        param = getattr(module, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``, e.g. ``"bn.running_mean"``.

        Example::

            >>> m = nn.Module(); m.register_buffer("steps", corenn.zeros(1))
            >>> m.get_buffer("steps")
            tensor([0.])
        """
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return getattr(module, name)

    def register_computed_attribute(self, name: str, compute, assign=None) -> None:
        """Make ``module.<name>`` a value computed from the module's other state each time it is read.

        Reading ``module.<name>`` returns ``compute(module)``; assigning ``module.<name> = value``
        calls ``assign(module, value)`` (without ``assign`` it raises ``AttributeError``). The
        name must be free: move a parameter or buffer out of the way first (delete it, or
        register what it is computed from under other names). A computed attribute is not
        saved by ``state_dict``; the state it is computed from is. This is the one
        reparametrization mechanism plugins share: parametrizations (``weight`` computed from
        ``parametrizations.weight.original``), pruning (``weight_orig * weight_mask``), fake
        quantization. The module's class is never changed, so ``copy.deepcopy`` and pickling
        work whenever ``compute`` and ``assign`` pickle (module-level functions, bound methods
        of modules, ``functools.partial`` of those). An exception raised by ``compute``
        -- an ``AttributeError`` too -- reaches the caller as it was raised. Reading a
        parameter, buffer or submodule costs nothing extra.

        Example::

            >>> class Scaled(nn.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.raw = nn.Parameter(corenn.ones(2))
            ...     def doubled(self):
            ...         return self.raw * 2
            >>> m = Scaled()
            >>> m.register_computed_attribute("weight", Scaled.doubled)
            >>> m.weight
            tensor([2., 2.], grad_fn=<MulBackward0>)
            >>> list(m.state_dict())
            ['raw']
            >>> m.remove_computed_attribute("weight")
        """
        if "_computed_attributes" not in self.__dict__:
            raise AttributeError("cannot register a computed attribute before Module.__init__() call")
        self._check_new_name("computed attribute", name, {})
        if not callable(compute):
            raise TypeError(f"register_computed_attribute(): argument 'compute' must be callable, "
                            f"got {_typename(compute)}")
        if assign is not None and not callable(assign):
            raise TypeError(f"register_computed_attribute(): argument 'assign' must be callable or None, "
                            f"got {_typename(assign)}")
        self._computed_attributes[name] = (compute, assign)

    def remove_computed_attribute(self, name: str) -> None:
        """Undo :meth:`register_computed_attribute`: ``module.<name>`` is no longer computed (the name is free).

        Raises ``KeyError`` if ``name`` is not a computed attribute of this module.

        Example::

            >>> m = nn.Module()
            >>> m.register_computed_attribute("answer", lambda module: 42)
            >>> m.answer
            42
            >>> m.remove_computed_attribute("answer")
            >>> hasattr(m, "answer")
            False
        """
        computed = self.__dict__.get("_computed_attributes", {})
        if name not in computed:
            raise KeyError(f"remove_computed_attribute(): '{name}' is not a computed attribute of "
                           f"{type(self).__name__} (computed: {sorted(computed) or 'none'})")
        del computed[name]

    def computed_attribute(self, name: str) -> "ComputedAttribute":
        """What :meth:`register_computed_attribute` registered under ``name``: ``(compute, assign)``.

        How the plugin that registered an attribute finds its own state again (pruning finds
        the pruning method whose ``apply_mask`` computes ``weight``), also on a deep copy or
        an unpickled module. Reading it computes nothing. ``KeyError`` if ``name`` is not a
        computed attribute of this module.

        Example::

            >>> def answer(module):
            ...     return 42
            >>> m = nn.Module()
            >>> m.register_computed_attribute("answer", answer)
            >>> m.computed_attribute("answer").compute is answer
            True
        """
        computed = self.__dict__.get("_computed_attributes", {})
        if name not in computed:
            raise KeyError(f"computed_attribute(): '{name}' is not a computed attribute of "
                           f"{type(self).__name__} (computed: {sorted(computed) or 'none'})")
        return ComputedAttribute(*computed[name])

    def computed_attribute_names(self) -> list:
        """The names registered with :meth:`register_computed_attribute` on this module (not its children).

        Example::

            >>> m = nn.Module()
            >>> m.register_computed_attribute("answer", lambda module: 42)
            >>> m.computed_attribute_names()
            ['answer']
        """
        return list(self.__dict__.get("_computed_attributes", ()))

    def get_extra_state(self):
        """State beyond parameters and buffers to save in ``state_dict`` (override with ``set_extra_state``).

        Example::

            >>> class Counter(nn.Module):
            ...     def __init__(self): super().__init__(); self.calls = 0
            ...     def get_extra_state(self): return {"calls": self.calls}
            ...     def set_extra_state(self, state): self.calls = state["calls"]
            >>> list(Counter().state_dict())
            ['_extra_state']
        """
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called. Please "
                           "override get_extra_state() in your module to return the extra state to save.")

    def set_extra_state(self, state) -> None:
        """Restore what :meth:`get_extra_state` returned (called by ``load_state_dict``).

        Example: see :meth:`get_extra_state`.
        """
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called. Please "
                           "override set_extra_state() in your module to load the extra state.")

    # ------------------------------------------------------------------------------------------------
    # Attribute protocol
    # ------------------------------------------------------------------------------------------------

    def __getattr__(self, name: str):
        # Only reached when normal lookup failed: the registered state lives in the three dicts.
        state = self.__dict__
        if "_parameters" in state:
            params = state["_parameters"]
            if name in params:
                return params[name]
            buffers = state["_buffers"]
            if name in buffers:
                return buffers[name]
            modules = state["_modules"]
            if name in modules:
                return modules[name]
            computed = state.get("_computed_attributes")
            if computed and name in computed:
                # Called here, not from a property: an AttributeError inside compute surfaces as raised.
                return computed[name][0](self)
        # A property (or other descriptor) that raised AttributeError inside itself lands here too;
        # run it again so its own error surfaces instead of a misleading "no attribute '<property>'".
        for klass in type(self).__mro__:
            descriptor = klass.__dict__.get(name)
            if descriptor is not None and hasattr(descriptor, "__get__"):
                return descriptor.__get__(self, type(self))
            if name in klass.__dict__:
                break
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        state = self.__dict__
        params = state.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_from(name, state, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(corenn.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = state.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                _remove_from(name, state, self._parameters, self._buffers, self._non_persistent_buffers_set)
                for hook in _global_module_registration_hooks.values():
                    output = hook(self, name, value)
                    if output is not None:
                        value = output
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    "(corenn.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = state.get("_buffers")
                if isinstance(value, Buffer) or (buffers is not None and name in buffers):
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                        "(corenn.nn.Buffer, corenn.Tensor or None expected)")
                    if buffers is None:
                        raise AttributeError("cannot assign buffer before Module.__init__() call")
                    if isinstance(value, Buffer):
                        persistent = value.persistent
                        _remove_from(name, state, self._parameters, self._modules)
                    else:
                        persistent = name not in self._non_persistent_buffers_set
                    self.register_buffer(name, value, persistent)
                else:
                    computed = state.get("_computed_attributes")
                    if computed and name in computed:
                        assign = computed[name][1]
                        if assign is None:
                            raise AttributeError(f"can't set attribute '{name}' of '{type(self).__name__}': it is "
                                                 "a computed attribute registered without assign")
                        assign(self, value)
                    else:
                        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        elif name in self.__dict__.get("_computed_attributes", ()):
            # Whoever registered it holds related state (a parametrization list, a mask): they remove it.
            raise AttributeError(f"can't delete attribute '{name}' of '{type(self).__name__}': it is a computed "
                                 f"attribute (remove_computed_attribute('{name}'), or the plugin's own remove "
                                 "function, e.g. remove_parametrizations)")
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        keys = (dir(self.__class__) + list(self.__dict__) + list(self._parameters) + list(self._modules)
                + list(self._buffers) + list(self.__dict__.get("_computed_attributes", ())))
        # Names such as Sequential's "0" are not valid attribute names.
        return sorted(key for key in set(keys) if not key[0].isdigit())

    def __setstate__(self, state):
        self.__dict__.update(state)
        # Modules pickled before an internal dict existed still load.
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                     "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
                     "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())
        if "_non_persistent_buffers_set" not in self.__dict__:
            object.__setattr__(self, "_non_persistent_buffers_set", set())
        if "_is_full_backward_hook" not in self.__dict__:
            object.__setattr__(self, "_is_full_backward_hook", None)
        if "_computed_attributes" not in self.__dict__:
            object.__setattr__(self, "_computed_attributes", {})

    # ------------------------------------------------------------------------------------------------
    # Walking the tree
    # ------------------------------------------------------------------------------------------------

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """Yield ``(dotted_name, module)`` for this module and every submodule, depth first, each once.

        Example::

            >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
            >>> [name for name, _ in net.named_modules()]
            ['', '0', '1']
        """
        if memo is None:
            memo = set()
        # Iterative pre-order walk: deep module chains must not hit the recursion limit.
        stack = [(prefix, self)]
        while stack:
            module_prefix, module = stack.pop()
            if module in memo:
                continue
            if remove_duplicate:
                memo.add(module)
            yield module_prefix, module
            children = [(module_prefix + ("." if module_prefix else "") + name, child)
                        for name, child in module._modules.items() if child is not None]
            stack.extend(reversed(children))

    def modules(self):
        """Every module in the tree, this one first (see :meth:`named_modules`).

        Example::

            >>> len(list(nn.Sequential(nn.ReLU(), nn.ReLU()).modules()))
            3
        """
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        """Yield ``(name, module)`` for the direct children, each module once.

        Example::

            >>> [name for name, _ in nn.Sequential(nn.ReLU(), nn.Tanh()).named_children()]
            ['0', '1']
        """
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self):
        """The direct children (see :meth:`named_children`).

        Example::

            >>> list(nn.Sequential(nn.ReLU()).children())
            [ReLU()]
        """
        for _, module in self.named_children():
            yield module

    def _named_members(self, get_members, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or value in memo:
                    continue
                if remove_duplicate:
                    memo.add(value)
                yield module_prefix + ("." if module_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Yield ``(dotted_name, parameter)``; a parameter shared by two modules is listed once.

        Example::

            >>> [name for name, _ in nn.Sequential(nn.Linear(2, 2)).named_parameters()]
            ['0.weight', '0.bias']
        """
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        """Every parameter of this module and (with ``recurse``) its submodules; what optimizers take.

        Example::

            >>> sum(p.numel() for p in nn.Linear(4, 3).parameters())
            15
        """
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Yield ``(dotted_name, buffer)`` for registered (non-None) buffers, persistent or not.

        Example::

            >>> m = nn.Module(); m.register_buffer("mean", corenn.zeros(2))
            >>> [name for name, _ in m.named_buffers()]
            ['mean']
        """
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        """Every buffer of this module and (with ``recurse``) its submodules.

        Example::

            >>> m = nn.Module(); m.register_buffer("mean", corenn.zeros(2))
            >>> list(m.buffers())
            [tensor([0., 0.])]
        """
        for _, buffer in self.named_buffers(recurse=recurse):
            yield buffer

    # ------------------------------------------------------------------------------------------------
    # Modes and bulk changes
    # ------------------------------------------------------------------------------------------------

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``mode=True``) or evaluation mode on this module and all submodules.

        Example::

            >>> m = nn.Sequential(nn.Dropout())
            >>> m.train(False)[0].training
            False
        """
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        # Each child's own train(), as in PyTorch: a subclass that keeps a part frozen (a BatchNorm left in
        # eval mode) overrides train() and must be asked, not bypassed.
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode: ``train(False)``.

        Example::

            >>> nn.Linear(2, 2).eval().training
            False
        """
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter (e.g. to freeze part of a model).

        Example::

            >>> m = nn.Linear(2, 2).requires_grad_(False)
            >>> m.weight.requires_grad
            False
        """
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters: to ``None`` (default) or to zeros.

        Example::

            >>> m = nn.Linear(2, 1); m(corenn.ones(2)).sum().backward()
            >>> m.zero_grad(); m.weight.grad is None
            True
        """
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                grad = param.grad
                if grad._grad_fn is not None:
                    grad.detach_()
                else:
                    grad._requires_grad = False
                grad.zero_()

    def apply(self, fn) -> "Module":
        """Call ``fn(module)`` on every submodule (children first) and then on ``self``; returns ``self``.

        Example::

            >>> @corenn.no_grad()
            ... def init_weights(m):
            ...     if isinstance(m, nn.Linear):
            ...         m.weight.fill_(1.0)
            >>> net = nn.Sequential(nn.Linear(2, 2)).apply(init_weights)
        """
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _apply(self, fn, recurse: bool = True) -> "Module":
        """Apply ``fn(tensor) -> tensor`` to every parameter, gradient and buffer, in place for parameters.

        Parameters keep their identity (their array is replaced), so optimizers holding
        them keep working; buffers are replaced by ``fn``'s result, as in PyTorch.
        """
        modules = list(self.modules()) if recurse else [self]
        with no_grad():
            for module in modules:
                for param in module._parameters.values():
                    if param is None:
                        continue
                    _replace_array(param, fn(param))
                    if param.grad is not None:
                        _replace_array(param.grad, fn(param.grad))
                buffers = module._buffers
                for key, buf in buffers.items():
                    if buf is not None:
                        buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move and/or cast parameters and buffers: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``.

        Only floating-point tensors change dtype. Parameters stay the same objects
        (their data moves), so an optimizer built before ``to()`` keeps working.

        Example::

            >>> m = nn.Linear(2, 2).to(dtype=corenn.float64)
            >>> m.weight.dtype
            corenn.float64
        """
        from corenn.tensor.tensor import _parse_to_args
        device, dtype, _copy = _parse_to_args(args, dict(kwargs))
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")

        def convert(t):
            if dtype is not None and t.dtype.is_floating_point:
                return t.to(device=device, dtype=dtype)
            return t.to(device=device) if device is not None else t
        return self._apply(convert)

    def cpu(self) -> "Module":
        """Move every parameter and buffer to the CPU.

        Example::

            >>> nn.Linear(2, 2).cpu().weight.device
            device(type='cpu')
        """
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None) -> "Module":
        """Move every parameter and buffer to a CUDA device (needs the corenn-cuda plugin).

        Example::

            >>> m = nn.Linear(2, 2).cuda()   # doctest: +SKIP
        """
        return self._apply(lambda t: t.cuda(device))

    def type(self, dst_type) -> "Module":
        """Cast every parameter and buffer to ``dst_type``.

        Example::

            >>> nn.Linear(2, 2).type(corenn.float64).weight.dtype
            corenn.float64
        """
        return self._apply(lambda t: t.type(dst_type))

    def float(self) -> "Module":
        """Cast floating-point parameters and buffers to float32.

        Example::

            >>> nn.Linear(2, 2).double().float().weight.dtype
            corenn.float32
        """
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self) -> "Module":
        """Cast floating-point parameters and buffers to float64.

        Example::

            >>> nn.Linear(2, 2).double().weight.dtype
            corenn.float64
        """
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def share_memory(self) -> "Module":
        """Move every parameter and buffer (and existing gradient) into shared memory (``Tensor.share_memory_``),
        so processes of :mod:`corenn.multiprocessing` that receive the module update one copy (Hogwild)."""
        for tensor in (*self.parameters(), *self.buffers()):
            tensor.share_memory_()
            if tensor.grad is not None:
                tensor.grad.share_memory_()
        return self

    def half(self) -> "Module":
        """Cast floating-point parameters and buffers to float16.

        Example::

            >>> nn.Linear(2, 2).half().weight.dtype
            corenn.float16
        """
        return self._apply(lambda t: t.half() if t.is_floating_point() else t)

    # ------------------------------------------------------------------------------------------------
    # Calling and hooks
    # ------------------------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        # Fast path: no hook anywhere means a plain forward call.
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or self._backward_pre_hooks
                or _global_forward_pre_hooks or _global_forward_hooks or _global_backward_hooks
                or _global_backward_pre_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    _call_impl = __call__

    def _call_with_hooks(self, args, kwargs):
        """Order: global pre-hooks, own pre-hooks, forward, global hooks, own hooks, backward-hook setup."""
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or self._backward_pre_hooks
                or _global_backward_hooks or _global_backward_pre_hooks):
            return self._call_with_global_forward_hooks(args, kwargs)
        result = None
        called_always = set()
        try:
            backward_pre_hooks = self._get_backward_pre_hooks()
            full_backward_hooks = self._get_backward_hooks()
            for hook_id, hook in (*_global_forward_pre_hooks.items(), *self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    new = hook(self, args, kwargs)
                    if new is not None:
                        if not (isinstance(new, tuple) and len(new) == 2):
                            raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                               f"new_kwargs), but got {new}.")
                        args, kwargs = new
                else:
                    new = hook(self, args)
                    if new is not None:
                        args = new if isinstance(new, tuple) else (new,)
            backward_hook = None
            if full_backward_hooks or backward_pre_hooks:
                backward_hook = BackwardHook(self, full_backward_hooks, backward_pre_hooks)
                args = backward_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in (*_global_forward_hooks.items(), *self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called or hook_id in _global_forward_hooks_always_called:
                    called_always.add(hook_id)
                if hook_id in self._forward_hooks_with_kwargs or hook_id in _global_forward_hooks_with_kwargs:
                    new = hook(self, args, kwargs, result)
                else:
                    new = hook(self, args, result)
                if new is not None:
                    result = new
            if backward_hook is not None:
                if not isinstance(result, (Tensor, tuple)):
                    _hooks._warn_bad_output(result)
                else:
                    result = backward_hook.setup_output_hook(result)
            return result
        except Exception:
            self._run_always_called_hooks(args, kwargs, result, called_always)
            raise

    def _run_always_called_hooks(self, args, kwargs, result, called_always) -> None:
        """After forward (or a hook) raised: the ``always_call`` forward hooks not yet run; the original error wins."""
        for hook_id, hook in (*_global_forward_hooks.items(), *self._forward_hooks.items()):
            always = hook_id in self._forward_hooks_always_called or hook_id in _global_forward_hooks_always_called
            if not always or hook_id in called_always:
                continue
            try:
                if hook_id in self._forward_hooks_with_kwargs or hook_id in _global_forward_hooks_with_kwargs:
                    new = hook(self, args, kwargs, result)
                else:
                    new = hook(self, args, result)
                if new is not None:
                    result = new
            except Exception as error:
                warnings.warn("forward hook with ``always_call=True`` raised an exception that was silenced as "
                              f"another error was raised in forward: {error}", stacklevel=3)

    def _call_with_global_forward_hooks(self, args, kwargs):
        """``_call_with_hooks`` when the only hooks are global forward (pre-)hooks, as a profiler's module view adds.

        The same calls in the same order, without this module's own hook tables and the
        backward-hook set-up, which cost more than the hooks themselves on every call.
        (Handle ids never repeat, so a global hook's id is never in this module's tables.)
        """
        result = None
        called_always = []
        try:
            for hook in tuple(_global_forward_pre_hooks.values()):
                new = hook(self, args)
                if new is not None:
                    args = new if isinstance(new, tuple) else (new,)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in tuple(_global_forward_hooks.items()):
                if hook_id in _global_forward_hooks_always_called:
                    called_always.append(hook_id)
                if hook_id in _global_forward_hooks_with_kwargs:
                    new = hook(self, args, kwargs, result)
                else:
                    new = hook(self, args, result)
                if new is not None:
                    result = new
            return result
        except Exception:
            self._run_always_called_hooks(args, kwargs, result, called_always)
            raise

    def _get_backward_hooks(self):
        if not (self._backward_hooks or _global_backward_hooks):
            return []
        return [*_global_backward_hooks.values(), *self._backward_hooks.values()]

    def _get_backward_pre_hooks(self):
        if not (self._backward_pre_hooks or _global_backward_pre_hooks):
            return []
        return [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]

    @staticmethod
    def _add_hook(hooks: OrderedDict, hook, prepend: bool, extra=()) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        handle = RemovableHandle(hooks, extra_dicts=extra)
        hooks[handle.id] = hook
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False) -> RemovableHandle:
        """Run ``hook(module, args)`` before ``forward``; a non-None result replaces the positional args.

        With ``with_kwargs=True`` the hook is ``hook(module, args, kwargs)`` and returns
        ``None`` or ``(new_args, new_kwargs)``. ``prepend=True`` runs it before the
        module's other pre-hooks (global pre-hooks still run first).

        Example::

            >>> m = nn.Identity()
            >>> h = m.register_forward_pre_hook(lambda mod, args: args[0] + 1)
            >>> m(corenn.zeros(1))
            tensor([1.])
            >>> h.remove()
        """
        handle = self._add_hook(self._forward_pre_hooks, hook, prepend, extra=(self._forward_pre_hooks_with_kwargs,))
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        return handle

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Run ``hook(module, args, output)`` after ``forward``; a non-None result replaces the output.

        ``with_kwargs=True``: ``hook(module, args, kwargs, output)``. ``always_call=True``:
        the hook also runs when ``forward`` raises (the error is then re-raised).

        Example::

            >>> m = nn.Identity()
            >>> with m.register_forward_hook(lambda mod, args, out: out * 10):
            ...     m(corenn.ones(1))
            tensor([10.])
        """
        handle = self._add_hook(self._forward_hooks, hook, prepend,
                                extra=(self._forward_hooks_with_kwargs, self._forward_hooks_always_called))
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        return handle

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(module, grad_output)`` when the gradients of this call's outputs are known.

        A non-None result (a tuple, one entry per output) replaces ``grad_output`` for
        the rest of the backward pass.

        Example::

            >>> m = nn.Linear(2, 2)
            >>> h = m.register_full_backward_pre_hook(lambda mod, grad_output: tuple(g * 0 for g in grad_output))
        """
        return self._add_hook(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(module, grad_input, grad_output)`` once the gradients of this call's inputs are computed.

        ``grad_input`` and ``grad_output`` are tuples with one entry per positional
        input / output (``None`` for non-tensors). A non-None result replaces
        ``grad_input`` in the rest of the backward pass.

        Example::

            >>> m = nn.Linear(3, 3)
            >>> h = m.register_full_backward_hook(lambda mod, gi, go: [corenn.ones_like(g) * 42. for g in gi])
            >>> x = corenn.randn(2, 3, requires_grad=True)
            >>> m(x).sum().backward()
            >>> x.grad
            tensor([[42., 42., 42.],
                    [42., 42., 42.]])
        """
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single Module. "
                               "Please use only one of them.")
        object.__setattr__(self, "_is_full_backward_hook", True)
        return self._add_hook(self._backward_hooks, hook, prepend)

    def register_backward_hook(self, hook):
        """Not provided: PyTorch's deprecated non-full backward hook; use :meth:`register_full_backward_hook`.

        Example::

            >>> m.register_full_backward_hook(hook)   # the supported form
        """
        raise NotImplementedError("register_backward_hook (PyTorch's deprecated hook on the last op's gradients) is "
                                  "not provided by corenn; use register_full_backward_hook(hook), which receives "
                                  "the gradients of the module's inputs and outputs")

    # ------------------------------------------------------------------------------------------------
    # State dicts
    # ------------------------------------------------------------------------------------------------

    def register_state_dict_pre_hook(self, hook) -> RemovableHandle:
        """Run ``hook(module, prefix, keep_vars)`` before this module's entries are saved by ``state_dict``.

        Example::

            >>> m = nn.Linear(1, 1)
            >>> h = m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: None)
        """
        return self._add_hook(self._state_dict_pre_hooks, hook, False)

    def register_state_dict_post_hook(self, hook) -> RemovableHandle:
        """Run ``hook(module, state_dict, prefix, local_metadata)`` after this module's subtree is saved.

        The hook may add, remove or replace entries of ``state_dict`` in place (keys of
        this module start with ``prefix``); it must return ``None``. Plugins use it to
        shape what they hang on a module.

        Example::

            >>> m = nn.Linear(1, 1)
            >>> h = m.register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd.pop(prefix + "bias"))
            >>> list(m.state_dict())
            ['weight']
        """
        def checked(module, state_dict, prefix, local_metadata):
            result = hook(module, state_dict, prefix, local_metadata)
            if result is not None:
                raise RuntimeError("state_dict post-hook must return None (modify the state_dict in place)")
        checked.__wrapped__ = hook
        return self._add_hook(self._state_dict_hooks, checked, False)

    def register_load_state_dict_pre_hook(self, hook) -> RemovableHandle:
        """Run ``hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)``.

        Called before this module reads its entries in ``load_state_dict``; the hook may
        rewrite ``state_dict`` in place (rename or convert keys under ``prefix``).

        Example::

            >>> m = nn.Linear(1, 1)
            >>> def rename(mod, sd, prefix, *rest):
            ...     if prefix + "w" in sd:
            ...         sd[prefix + "weight"] = sd.pop(prefix + "w")
            >>> h = m.register_load_state_dict_pre_hook(rename)
        """
        return self._add_hook(self._load_state_dict_pre_hooks, hook, False)

    def register_load_state_dict_post_hook(self, hook) -> RemovableHandle:
        """Run ``hook(module, incompatible_keys)`` after this module's subtree is loaded.

        ``incompatible_keys.missing_keys`` / ``.unexpected_keys`` may be edited in place
        (e.g. to forgive a key a plugin recomputes); the hook must return ``None``.

        Example::

            >>> m = nn.Linear(1, 1)
            >>> h = m.register_load_state_dict_post_hook(lambda mod, keys: keys.missing_keys.clear())
            >>> m.load_state_dict({}, strict=True)
            <All keys matched successfully>
        """
        return self._add_hook(self._load_state_dict_post_hooks, hook, False)

    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if type(self).get_extra_state is not Module.get_extra_state:
            destination[prefix + _EXTRA_STATE_KEY_SUFFIX] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """The module's state: parameters and persistent buffers by dotted name, in an ``OrderedDict``.

        Values are detached tensors sharing memory with the module's (``keep_vars=True``
        gives the parameters themselves). ``result._metadata[module_prefix]`` holds each
        module's ``{"version": ...}``.

        Example::

            >>> list(nn.Sequential(nn.Linear(2, 2)).state_dict())
            ['0.weight', '0.bias']
        """
        if args:
            # PyTorch's deprecated positional form: state_dict(destination, prefix, keep_vars).
            warnings.warn("Positional args are being deprecated, use kwargs instead.", FutureWarning, stacklevel=2)
            destination = args[0] if len(args) > 0 else destination
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = dict(version=self._version)
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        # Plugins' state on this module (hookspecs.py); a handler that raises is detached, with a warning.
        _plugins._run_module_state_handlers("state_dict_post", self, destination, prefix)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            hook(self, destination, prefix, local_metadata)
        return destination

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs, expected_keys=None):
        """Copy this module's own entries (not its children's) from ``state_dict``.

        Internal: plugins take part through the public load hooks, not by overriding this.
        """
        for hook in self._load_state_dict_pre_hooks.values():
            hook(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        _plugins._run_module_state_handlers("load_state_dict_pre", self, state_dict, prefix)
        assign = local_metadata.get("assign_to_params_buffers", False)
        local = [(name, value) for name, value in self._parameters.items() if value is not None]
        local += [(name, value) for name, value in self._buffers.items()
                  if value is not None and name not in self._non_persistent_buffers_set]
        for name, param in local:
            key = prefix + name
            if expected_keys is not None:
                expected_keys.add(key)
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            input_param = state_dict[key]
            if not isinstance(input_param, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected corenn.Tensor or Tensor-like '
                                  f"object from checkpoint but received {type(input_param)}")
                continue
            if param.ndim == 0 and input_param.ndim == 1 and input_param.shape[0] == 1:
                input_param = input_param[0]  # old checkpoints saved scalars as 1-element vectors
            if input_param.shape != param.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {input_param.shape} from "
                                  f"checkpoint, the shape in current model is {param.shape}.")
                continue
            try:
                with no_grad():
                    if assign:
                        if isinstance(param, Parameter):
                            if not isinstance(input_param, Parameter):
                                input_param = Parameter(input_param, requires_grad=param.requires_grad)
                            else:
                                input_param.requires_grad_(param.requires_grad)
                        setattr(self, name, input_param)
                    else:
                        param.copy_(input_param)
            except Exception as error:
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                                  f"{param.size()} and whose dimensions in the checkpoint are {input_param.size()}, "
                                  f"an exception occurred : {error.args}.")
        extra_key = prefix + _EXTRA_STATE_KEY_SUFFIX
        if type(self).set_extra_state is not Module.set_extra_state:
            if expected_keys is not None:
                expected_keys.add(extra_key)
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing_keys.append(extra_key)

    def load_state_dict(self, state_dict: Mapping, strict: bool = True, assign: bool = False):
        """Copy parameters and buffers from ``state_dict`` into this module and its submodules.

        Returns ``(missing_keys, unexpected_keys)`` (prints as ``<All keys matched
        successfully>`` when both are empty). With ``strict=True`` any missing or
        unexpected key raises; a shape mismatch always raises. The error lists every
        problem at once. ``assign=True`` makes the module hold the given tensors
        instead of copying into its own.

        Example::

            >>> src, dst = nn.Linear(2, 2), nn.Linear(2, 2)
            >>> dst.load_state_dict(src.state_dict())
            <All keys matched successfully>
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys: list = []
        unexpected_keys: list = []
        error_msgs: list = []
        metadata = getattr(state_dict, "_metadata", None)
        # A copy, so that load pre-hooks can rewrite keys without touching the caller's dict.
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata
        expected_keys: set = set()
        skipped_prefixes = []

        def load(module, prefix):
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = True
            module._load_from_state_dict(state_dict, prefix, local_metadata, True, missing_keys, unexpected_keys,
                                         error_msgs, expected_keys)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")
                else:
                    skipped_prefixes.append(prefix + name + ".")
            if module is self:
                # Unexpected keys are found in one pass over the (possibly hook-rewritten) dict, so loading
                # stays linear in the number of entries however many modules the tree has. PyTorch finds
                # them module by module; only the root's post-hooks can tell the difference, and they run
                # after this pass, seeing every unexpected key.
                skipped = tuple(skipped_prefixes)
                unexpected_keys.extend(key for key in state_dict if key not in expected_keys
                                       and not (skipped and key.startswith(skipped)))
            incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                if hook(module, incompatible) is not None:
                    raise RuntimeError("load_state_dict post-hook must return None (edit incompatible_keys in place)")

        load(self, "")
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(type(self).__name__,
                                                                                   "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # ------------------------------------------------------------------------------------------------
    # Printing
    # ------------------------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The module-specific part of ``repr`` (e.g. ``in_features=4, out_features=3``); override it.

        Example::

            >>> class Scale(nn.Module):
            ...     def extra_repr(self): return "factor=2"
            >>> Scale()
            Scale(factor=2)
        """
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        text = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"


def _remove_from(name, *containers):
    for container in containers:
        if name in container:
            if isinstance(container, dict):
                del container[name]
            else:
                container.discard(name)


def _replace_array(tensor: Tensor, converted: Tensor) -> None:
    """Make ``tensor`` hold ``converted``'s data (device/dtype change) while staying the same object."""
    if converted is tensor:
        return
    tensor._data = converted._data
    tensor._device = converted._device
