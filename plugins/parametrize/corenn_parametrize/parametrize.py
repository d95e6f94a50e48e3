"""``corenn.nn.utils.parametrize``: a tensor of a module computed from stored originals (mirrors ``torch.nn.utils.parametrize``).

``register_parametrization(module, "weight", P())`` moves ``module.weight`` to
``module.parametrizations.weight.original`` and makes ``module.weight`` read as
``P()(original)``, computed again at every read (once per ``cached()`` block). The
state-dict keys are PyTorch's (``parametrizations.weight.original``), so checkpoints
move between corenn and PyTorch.

Unlike PyTorch, the module keeps its own class: the computed ``weight`` is a
computed attribute of the core's ``Module`` (``Module.register_computed_attribute``),
not a property of an injected ``Parametrized<Class>`` subclass. So parametrized
modules deep-copy, pickle and ``isinstance``/``type()`` as before, and an error
raised inside a parametrization reaches you with its own message.

Example::

    >>> from corenn import nn
    >>> import corenn.nn.utils.parametrize as P
    >>> class Symmetric(nn.Module):
    ...     def forward(self, X):
    ...         return X.triu() + X.triu(1).mT
    >>> layer = nn.Linear(3, 3)
    >>> P.register_parametrization(layer, "weight", Symmetric())
    Linear(
      in_features=3, out_features=3, bias=True
      (parametrizations): ModuleDict(
        (weight): ParametrizationList(
          (0): Symmetric()
        )
      )
    )
    >>> bool((layer.weight == layer.weight.mT).all())
    True
    >>> sorted(layer.state_dict())
    ['bias', 'parametrizations.weight.original']
"""
from __future__ import annotations

import collections.abc
import itertools
from contextlib import contextmanager

import corenn
from corenn.nn import Module, ModuleDict, ModuleList, Parameter

__all__ = ["cached", "ParametrizationList", "register_parametrization", "is_parametrized",
           "remove_parametrizations", "type_before_parametrizations", "transfer_parametrizations_and_params"]

# cached(): how many blocks are open, and (id(module), tensor name) -> the value computed in them
_cache_enabled = 0
_cache: dict = {}


@contextmanager
def cached():
    """Compute each parametrized tensor once inside the block, however often it is read.

    Without it, every read of ``module.weight`` runs the parametrization again: a weight
    used at every step of a recurrence is recomputed at every step. Inside the block the
    first read computes it and later reads return that tensor (with its autograd graph),
    until the outermost ``cached()`` block ends. Assigning ``module.weight = X`` inside the
    block drops that tensor's cached value.

    Example::

        >>> import corenn.nn.utils.parametrize as P
        >>> with P.cached():                       # doctest: +SKIP
        ...     output = rnn(inputs)               # the orthogonal weight is computed once
    """
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _register_parameter_or_buffer(module: Module, name: str, value) -> None:
    if isinstance(value, Parameter):
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


def _set_keeping_identity(destination, source) -> None:
    """Make ``destination`` hold ``source``'s values and stay the same object, so optimizers holding it keep working."""
    destination.data = source


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, in order, and the original tensor(s) they are applied to.

    It is ``module.parametrizations[tensor_name]``. Its ``original`` (or, when the first
    parametrization's ``right_inverse`` returns a sequence, ``original0``, ``original1``,
    ...) is the parameter or buffer that is stored and trained; calling it returns the
    parametrized tensor. Built by :func:`register_parametrization`, not by hand.

    Example::

        >>> layer = P.register_parametrization(nn.Linear(2, 2), "weight", Symmetric())
        >>> layer.parametrizations.weight.original.shape
        corenn.Size([2, 2])
    """

    def __init__(self, modules, original, unsafe: bool = False, tensor_name: str | None = None) -> None:
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        # The name this list computes on its owner: lets a load_state_dict of the owner restore the
        # originals from a saved computed value (restore_from_computed_value).
        self.tensor_name = tensor_name
        original_shape, original_dtype = original.shape, original.dtype
        with corenn.no_grad():
            new = original
            for parametrization in reversed(self):
                if hasattr(parametrization, "right_inverse"):
                    try:
                        new = parametrization.right_inverse(new)
                    except NotImplementedError:
                        pass  # at registration a missing right_inverse counts as the identity, as in PyTorch
        if not isinstance(new, (corenn.Tensor, collections.abc.Sequence)) or isinstance(new, str):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                             f"Got {type(new).__name__}")
        self.is_tensor = isinstance(new, corenn.Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError("When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                                 f"original.dtype: {original.dtype}\n"
                                 f"right_inverse(original).dtype: {new.dtype}")
            with corenn.no_grad():
                _set_keeping_identity(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, original_i in enumerate(new):
                if not isinstance(original_i, corenn.Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors (list, tuple...). "
                                     f"Got element {i} of the sequence with type {type(original_i).__name__}.")
                if isinstance(original, Parameter):
                    original_i = Parameter(original_i.detach(), original.requires_grad)
                else:
                    original_i = original_i.detach()
                _register_parameter_or_buffer(self, f"original{i}", original_i)
        if not self.unsafe:
            value = self()
            if not isinstance(value, corenn.Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(value).__name__}.")
            if value.dtype != original_dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless "
                                 "`unsafe` flag is enabled.\n"
                                 f"unparametrized dtype: {original_dtype}\n"
                                 f"parametrized dtype: {value.dtype}")
            if value.shape != original_shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless "
                                 "`unsafe` flag is enabled.\n"
                                 f"unparametrized shape: {original_shape}\n"
                                 f"parametrized shape: {value.shape}")
        self.register_load_state_dict_pre_hook(self.restore_from_computed_value)

    def originals(self) -> list:
        """The stored tensors, in the order the first parametrization takes them.

        Example::

            >>> [t.shape for t in layer.parametrizations.weight.originals()]
            [corenn.Size([2, 2])]
        """
        if self.is_tensor:
            return [self.original]
        return [getattr(self, f"original{i}") for i in range(self.ntensors)]

    def original_names(self) -> list:
        """``["original"]``, or ``["original0", "original1", ...]`` for a right_inverse returning a sequence."""
        return ["original"] if self.is_tensor else [f"original{i}" for i in range(self.ntensors)]

    def right_inverse(self, value) -> None:
        """Set the originals so that the parametrized tensor becomes ``value`` (what ``module.weight = value`` runs).

        Each parametrization's ``right_inverse`` runs, last to first; one without it makes
        this a ``RuntimeError``. The originals stay the same objects (their values change),
        so an optimizer holding them keeps working.

        Example::

            >>> layer.parametrizations.weight.right_inverse(corenn.eye(2))
        """
        with corenn.no_grad():
            for parametrization in reversed(self):
                if not hasattr(parametrization, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(parametrization).__name__} does not implement "
                                       "right_inverse.")
                value = parametrization.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, corenn.Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got {type(value).__name__}")
                self._check_like_original("original", self.original, value)
                _set_keeping_identity(self.original, value)
            else:
                if not isinstance(value, collections.abc.Sequence) or isinstance(value, str):
                    raise ValueError(f"'right_inverse' must return a sequence of tensors. Got {type(value).__name__}.")
                if len(value) != self.ntensors:
                    raise ValueError(f"'right_inverse' must return a sequence of tensors of length {self.ntensors}. "
                                     f"Got a sequence of length {len(value)}.")
                for i, tensor in enumerate(value):
                    if not isinstance(tensor, corenn.Tensor):
                        raise ValueError(f"`right_inverse` must return a sequence of tensors. Got element {i} of type "
                                         f"{type(tensor).__name__}")
                    original_i = getattr(self, f"original{i}")
                    self._check_like_original(f"original{i}", original_i, tensor, index=i)
                    _set_keeping_identity(original_i, tensor)

    def _check_like_original(self, name, original, value, index=None) -> None:
        which = "The tensor" if index is None else f"Tensor {index}"
        if value.dtype != original.dtype:
            raise ValueError(f"{which} returned by `right_inverse` has dtype {value.dtype} while `{name}` has dtype "
                             f"{original.dtype}")
        # PyTorch's set_ would silently change the stored tensor's shape (and the optimizer's state
        # would no longer fit it); here that takes unsafe=True.
        if value.shape != original.shape and not self.unsafe:
            raise ValueError(f"{which} returned by `right_inverse` has shape {tuple(value.shape)} while `{name}` has "
                             f"shape {tuple(original.shape)} (register the parametrization with unsafe=True to allow "
                             "changing it)")

    def forward(self):
        """The parametrized tensor: the parametrizations applied in order to the original(s)."""
        if self.is_tensor:
            value = self[0](self.original)
        else:
            value = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for parametrization in itertools.islice(self, 1, None):
            value = parametrization(value)
        return value

    def restore_from_computed_value(self, module, state_dict, prefix, local_metadata, strict, missing_keys,
                                    unexpected_keys, error_msgs) -> None:
        """Load-state-dict pre-hook: a state dict holding the computed tensor, not the originals, sets them by right_inverse.

        A checkpoint saved from an unparametrized model (or ``{"weight": module.weight}``)
        has ``weight`` where this list expects ``parametrizations.weight.original``. PyTorch
        reports both keys under ``strict=True`` and, under ``strict=False``, leaves
        ``original`` as it was: the loaded weight is silently lost. Here the saved value is
        assigned as ``module.weight = value`` would (through every ``right_inverse``), so
        the loaded module computes the saved weight, constraint included (an orthogonal
        weight stays orthogonal). A parametrization without ``right_inverse`` makes the load
        fail, naming the key.
        """
        suffix = f"parametrizations.{self.tensor_name}."
        if self.tensor_name is None or not prefix.endswith(suffix):
            return
        if any(prefix + name in state_dict for name in self.original_names()):
            return
        computed_key = prefix[:-len(suffix)] + self.tensor_name
        if computed_key not in state_dict:
            return
        value = state_dict[computed_key]
        if not isinstance(value, corenn.Tensor):
            return  # the load itself reports a value that is not a tensor
        try:
            first = self.originals()[0]
            self.right_inverse(value.to(device=first.device, dtype=first.dtype))
        except Exception as error:  # noqa: BLE001 - any failure is reported by the load, naming the key
            error_msgs.append(f'While restoring "{prefix}{self.original_names()[0]}" from the computed value '
                              f'"{computed_key}" through right_inverse, an exception occurred: '
                              f"{type(error).__name__}: {error}")
            return
        del state_dict[computed_key]
        # Whatever right_inverse set (the originals, an orthogonal map's base) is now what this list loads.
        for key, tensor in self.state_dict(prefix=prefix, keep_vars=True).items():
            state_dict.setdefault(key, tensor.detach())


class ParametrizedTensor:
    """What ``module.<name>`` is once parametrized: a picklable pair of the core's compute / assign callables.

    Registered with ``Module.register_computed_attribute``; ``compute`` reads
    ``module.parametrizations[name]()`` (through the ``cached()`` cache when one is open),
    ``assign`` runs its ``right_inverse``.
    """

    def __init__(self, tensor_name: str) -> None:
        self.tensor_name = tensor_name

    def compute(self, module):
        parametrizations = module.parametrizations[self.tensor_name]
        if _cache_enabled:
            key = (id(module), self.tensor_name)
            value = _cache.get(key)
            if value is None:
                value = _cache[key] = parametrizations()
            return value
        return parametrizations()

    def assign(self, module, value) -> None:
        if not isinstance(value, corenn.Tensor):
            raise TypeError(f"cannot assign '{type(value).__name__}' to the parametrized tensor "
                            f"'{self.tensor_name}' of {type(module).__name__} (Tensor expected)")
        module.parametrizations[self.tensor_name].right_inverse(value)
        _cache.pop((id(module), self.tensor_name), None)

    def __repr__(self):
        return f"ParametrizedTensor({self.tensor_name!r})"


def _check_module_and_name(function: str, module, tensor_name) -> None:
    if not isinstance(module, Module):
        raise TypeError(f"{function}(): argument 'module' must be corenn.nn.Module, not {type(module).__name__}")
    if not isinstance(tensor_name, str):
        raise TypeError(f"{function}(): argument 'tensor_name' must be str, not {type(tensor_name).__name__}")


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` read as ``parametrization(original)``; returns ``module``.

    The parameter or buffer ``tensor_name`` moves to
    ``module.parametrizations[tensor_name].original`` (the same object, so an optimizer
    built before keeps training it). Registering a second parametrization on the same
    name chains it: ``module.weight`` becomes ``second(first(original))``.

    If ``parametrization`` has ``right_inverse(X)``, it sets the original at registration
    (so the tensor keeps its value where the parametrization allows) and on assignment
    ``module.weight = X``. A ``right_inverse`` returning a tuple stores
    ``original0``, ``original1``, ... and ``forward`` then takes that many tensors.
    ``unsafe=True`` skips the checks that the parametrization keeps the tensor's shape
    and dtype.

    Example::

        >>> layer = P.register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
        >>> P.is_parametrized(layer, "weight")
        True
    """
    _check_module_and_name("register_parametrization", module, tensor_name)
    if not isinstance(parametrization, Module):
        raise TypeError("register_parametrization(): argument 'parametrization' must be corenn.nn.Module, not "
                        f"{type(parametrization).__name__}")
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            current = getattr(module, tensor_name)
            new = parametrization(current)
            if not isinstance(new, corenn.Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(new).__name__}.")
            if new.dtype != current.dtype:
                raise ValueError("Registering a parametrization may not change the dtype of the tensor, unless the "
                                 "`unsafe` flag is enabled.\n"
                                 f"module.{tensor_name}.dtype: {current.dtype}\n"
                                 f"parametrization(module.{tensor_name}).dtype: {new.dtype}")
            if new.shape != current.shape:
                raise ValueError("Registering a parametrization may not change the shape of the tensor, unless the "
                                 "`unsafe` flag is enabled.\n"
                                 f"module.{tensor_name}.shape: {current.shape}\n"
                                 f"parametrization(module.{tensor_name}).shape: {new.shape}")
            if hasattr(parametrization, "right_inverse"):
                try:
                    inverse = parametrization.right_inverse(new)
                except NotImplementedError:
                    pass
                else:
                    if not isinstance(inverse, corenn.Tensor):
                        raise ValueError("parametrization.right_inverse must return a tensor. Got: "
                                         f"{type(inverse).__name__}")
                    if inverse.dtype != current.dtype:
                        raise ValueError("The tensor returned by parametrization.right_inverse must have the same "
                                         f"dtype as module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
                                         f"module.{tensor_name}.dtype: {current.dtype}\n"
                                         f"returned dtype: {inverse.dtype}")
                    if inverse.shape != current.shape:
                        raise ValueError("The tensor returned by parametrization.right_inverse must have the same "
                                         f"shape as module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
                                         f"module.{tensor_name}.shape: {current.shape}\n"
                                         f"returned shape: {inverse.shape}")
        parametrizations = module.parametrizations[tensor_name]
        parametrizations.append(parametrization)
        parametrizations.unsafe |= unsafe
        return module
    parameters = dict(module.named_parameters(recurse=False))
    buffers = dict(module.named_buffers(recurse=False))
    if tensor_name not in parameters and tensor_name not in buffers:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a parametrized element with "
                         f"name '{tensor_name}'")
    original = parameters.get(tensor_name, buffers.get(tensor_name))
    # Built first: a parametrization that fails its checks leaves the module untouched.
    parametrization_list = ParametrizationList([parametrization], original, unsafe=unsafe, tensor_name=tensor_name)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = parametrization_list
    attribute = ParametrizedTensor(tensor_name)
    module.register_computed_attribute(tensor_name, attribute.compute, attribute.assign)
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has a parametrization on ``tensor_name`` (on any tensor when it is None).

    Example::

        >>> P.is_parametrized(nn.Linear(2, 2))
        False
    """
    parametrizations = getattr(module, "parametrizations", None)
    if not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo :func:`register_parametrization` on ``tensor_name``: it becomes a plain parameter (or buffer) again.

    With ``leave_parametrized=True`` it keeps its current (constrained) value; with
    False it goes back to the original's value. Either way it is the original object,
    so an optimizer holding it keeps training it. Not possible with
    ``leave_parametrized=False`` when the originals are a sequence (``original0``, ...).

    Example::

        >>> layer = P.register_parametrization(nn.Linear(2, 2), "weight", Symmetric())
        >>> P.remove_parametrizations(layer, "weight")
        Linear(in_features=2, out_features=2, bias=True)
    """
    _check_module_and_name("remove_parametrizations", module, tensor_name)
    if not isinstance(leave_parametrized, bool):
        raise TypeError("remove_parametrizations(): argument 'leave_parametrized' must be bool, not "
                        f"{type(leave_parametrized).__name__}")
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with corenn.no_grad():
                value = getattr(module, tensor_name)
            if value.shape != original.shape or value.dtype != original.dtype:
                # An unsafe parametrization changed them: the original cannot hold the value as it is.
                original = (Parameter(value.detach().clone(), original.requires_grad)
                            if isinstance(original, Parameter) else value.detach().clone())
            else:
                with corenn.no_grad():
                    _set_keeping_identity(original, value.detach().clone())
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor that is parametrized "
                             "in terms of a sequence of tensors.")
        value = getattr(module, tensor_name)
        original = Parameter(value.detach(), value.requires_grad) if value.requires_grad else value.detach()
    module.remove_computed_attribute(tensor_name)
    del module.parametrizations[tensor_name]
    _cache.pop((id(module), tensor_name), None)
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
    return module


def type_before_parametrizations(module: Module) -> type:
    """The module's class. PyTorch swaps in a ``Parametrized<Class>`` subclass; corenn never does, so this is ``type(module)``.

    Example::

        >>> P.type_before_parametrizations(layer) is nn.Linear
        True
    """
    return type(module)


def transfer_parametrizations_and_params(from_module: Module, to_module: Module,
                                         tensor_name: str | None = None) -> Module:
    """Register ``from_module``'s parametrizations (all, or those of ``tensor_name``) on ``to_module``, originals included.

    A tensor ``to_module`` lacks is created first. The parametrization modules are
    shared between the two modules and the originals are the same objects, as in PyTorch.

    Example::

        >>> source = P.register_parametrization(nn.Linear(2, 2), "weight", Symmetric())
        >>> target = P.transfer_parametrizations_and_params(source, nn.Linear(2, 2))
        >>> bool((target.weight == source.weight).all())
        True
    """
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name).detach()))
        source = from_module.parametrizations[name]
        for parametrization in source:
            register_parametrization(to_module, name, parametrization)
        target = to_module.parametrizations[name]
        for original_name in source.original_names():
            setattr(target, original_name, getattr(source, original_name))
    return to_module
