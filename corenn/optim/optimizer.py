"""The :class:`Optimizer` base: parameter groups, per-parameter state, state dicts, step hooks.

Mirrors ``torch.optim.Optimizer``. Subclasses implement :meth:`Optimizer.step`; the
update itself is a plain function over lists of parameters (``sgd``, ``adam``, ...,
like PyTorch's ``_single_tensor_*`` functions) that works on the raw arrays
(``p._data``) with the parameter's array module, so a step adds little Python
overhead and records nothing for autograd.

Where corenn differs from PyTorch: an optimizer built from ``model.named_parameters()``
keeps the names, its state dict carries them (``param_groups[i]["param_names"]``), and
:meth:`Optimizer.load_state_dict` then matches saved state to parameters **by name**
and returns which names did not match (:class:`OptimizerLoadResult`), instead of
pairing them by position and silently mixing up state when a model changed.
"""
from __future__ import annotations

import functools
import warnings
from collections import OrderedDict, defaultdict
from itertools import chain
from typing import Any, Callable, NamedTuple

from corenn.autograd import grad_mode
from corenn.tensor.tensor import Tensor
from corenn.utils.hooks import RemovableHandle
# The update scratch arrays and effective gradient live with the update kernels; RMSprop/Adagrad use them too.
from corenn.ops.optim_update import ScratchArrays as _ScratchArrays, effective_grad as _effective_grad  # noqa: F401

__all__ = ["Optimizer", "OptimizerLoadResult", "required"]


class _RequiredParameter:
    """Singleton marking a hyperparameter a param group must give (SGD's ``lr`` in old PyTorch)."""

    def __repr__(self):
        return "<required parameter>"


#: Default value meaning "every param group must specify this hyperparameter".
required = _RequiredParameter()


class OptimizerLoadResult(NamedTuple):
    """What :meth:`Optimizer.load_state_dict` could not match, by parameter name.

    ``missing_keys``: names of this optimizer's parameters that had no saved state
    (they start fresh). ``unexpected_keys``: names in the saved state with no parameter
    here (their state is dropped). Both are empty when matching is by position.

    Example::

        >>> result = opt.load_state_dict(saved)
        >>> result.missing_keys, result.unexpected_keys
        ([], ['head.weight'])
    """

    missing_keys: list
    unexpected_keys: list

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return f"OptimizerLoadResult(missing_keys={self.missing_keys}, unexpected_keys={self.unexpected_keys})"


def _type_name(obj) -> str:
    if isinstance(obj, Tensor):
        return f"corenn.{obj.type().split('.')[-1]}"
    return type(obj).__name__


def _with_step_hooks(step):
    """Wrap a subclass's ``step`` so that step pre/post hooks run and schedulers see it was called."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        self._opt_called = True  # read by lr schedulers to warn about a wrong call order
        global_pre = _global_step_pre_hooks
        if self._optimizer_step_pre_hooks or global_pre:
            for hook in chain(global_pre.values(), self._optimizer_step_pre_hooks.values()):
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(f"{hook} must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {result}.")
                    args, kwargs = result
        out = step(self, *args, **kwargs)
        if self._optimizer_step_post_hooks or _global_step_post_hooks:
            for hook in chain(self._optimizer_step_post_hooks.values(), _global_step_post_hooks.values()):
                hook(self, args, kwargs)
        return out
    wrapper._hooked = True
    return wrapper


_global_step_pre_hooks: OrderedDict = OrderedDict()
_global_step_post_hooks: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook) -> RemovableHandle:
    """Run ``hook(optimizer, args, kwargs)`` before every optimizer's ``step``.

    Example::

        >>> handle = corenn.optim.optimizer.register_optimizer_step_pre_hook(lambda opt, a, k: None)
        >>> handle.remove()
    """
    handle = RemovableHandle(_global_step_pre_hooks)
    _global_step_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook) -> RemovableHandle:
    """Run ``hook(optimizer, args, kwargs)`` after every optimizer's ``step``."""
    handle = RemovableHandle(_global_step_post_hooks)
    _global_step_post_hooks[handle.id] = hook
    return handle


class Optimizer:
    """Base class of all optimizers (mirrors ``torch.optim.Optimizer``).

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs (what
    ``module.named_parameters()`` yields), or of dicts defining parameter groups
    (``{"params": [...], "lr": 0.1}``); ``defaults`` holds the hyperparameters a
    group does not set itself. ``self.state[p]`` is the per-parameter state.

    Example::

        >>> w = corenn.zeros(3, requires_grad=True)
        >>> opt = corenn.optim.SGD([w], lr=0.1)
        >>> (w - 1).pow(2).sum().backward()
        >>> opt.step(); opt.zero_grad()
        >>> w
        tensor([0.2000, 0.2000, 0.2000], requires_grad=True)
    """

    #: state entries whose shape is not the parameter's (Adafactor's row and column statistics): loading a
    #: state dict checks the others against their parameter's shape
    _reduced_state_keys: frozenset = frozenset()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_hooked", False):
            cls.step = _with_step_hooks(step)

    def __init__(self, params, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_type_name(params)}")
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        if isinstance(params, dict):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got a single dict: wrap a parameter group in a list, [{'params': ...}]")
        try:
            param_groups = list(params)
        except TypeError:
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_type_name(params)}") from None
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(param_group)

    # -- pickling / copying: hooks are not part of the state ------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
                     "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
                     "_optimizer_load_state_dict_post_hooks"):
            if name not in self.__dict__:
                setattr(self, name, OrderedDict())

    def __repr__(self) -> str:
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key not in ("params", "param_names"):
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # -- groups -----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (e.g. to unfreeze layers later).

        Example::

            >>> opt.add_param_group({"params": head.parameters(), "lr": 1e-3})
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError("param_group must have a 'params' entry listing the tensors to optimize")
        param_group = dict(param_group)
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)

        tensors, names = [], []
        for entry in params:
            if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
                names.append(entry[0])
                tensors.append(entry[1])
            else:
                tensors.append(entry)
        if names and len(names) != len(tensors):
            raise ValueError("all optimizer params should be with/without names. Some param names are missing")
        if names:
            if len(set(names)) != len(names):
                duplicates = sorted({n for n in names if names.count(n) > 1})
                raise ValueError(f"optimizer param names must be unique, but {duplicates} appear more than once")
            param_group["param_names"] = names
        elif "param_names" in param_group:
            names = list(param_group["param_names"])
            if len(names) != len(tensors):
                raise ValueError(f"param_group has {len(tensors)} params but {len(names)} param_names")
            param_group["param_names"] = names
        param_group["params"] = tensors

        for p in tensors:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_type_name(p)}")
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")

        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)

        ids = [id(p) for p in tensors]
        if len(ids) != len(set(ids)):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will cause "
                          "an error; see github.com/pytorch/pytorch/issues/40967 for more information", stacklevel=3)
        existing = set()
        for group in self.param_groups:
            existing.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                kind = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {kind} to the optimizer")
        if existing.intersection(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        if names:
            taken = {n for g in self.param_groups for n in g.get("param_names", ())}
            clash = sorted(taken.intersection(names))
            if clash:
                raise ValueError(f"param names {clash} are already used by another parameter group")
        self.param_groups.append(param_group)

    # -- gradients ----------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized tensors: to ``None`` (default) or to zeros.

        Example::

            >>> opt.zero_grad()            # p.grad is None afterwards
            >>> opt.zero_grad(set_to_none=False)   # p.grad is all zeros
        """
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if grad._grad_fn is not None:
                        grad.detach_()
                    else:
                        grad._requires_grad = False
                    grad._data[...] = 0

    def step(self, closure: Callable[[], Any] | None = None):
        """Update the parameters once from their ``.grad``; ``closure`` re-evaluates the loss and returns it."""
        raise NotImplementedError

    def _scratch(self) -> _ScratchArrays:
        scratch = self.__dict__.get("_scratch_arrays")
        if scratch is None:
            scratch = self._scratch_arrays = _ScratchArrays()
        return scratch

    def _run_closure(self, closure):
        if closure is None:
            return None
        with grad_mode.enable_grad():
            return closure()

    # -- hooks ---------------------------------------------------------------------------------
    def register_step_pre_hook(self, hook) -> RemovableHandle:
        """Run ``hook(optimizer, args, kwargs)`` before each ``step``; it may return new ``(args, kwargs)``.

        Example::

            >>> handle = opt.register_step_pre_hook(lambda opt, args, kwargs: print("stepping"))
            >>> handle.remove()
        """
        handle = RemovableHandle(self._optimizer_step_pre_hooks)
        self._optimizer_step_pre_hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook) -> RemovableHandle:
        """Run ``hook(optimizer, args, kwargs)`` after each ``step``."""
        handle = RemovableHandle(self._optimizer_step_post_hooks)
        self._optimizer_step_post_hooks[handle.id] = hook
        return handle

    def register_state_dict_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(optimizer)`` before :meth:`state_dict` builds the dict."""
        return _register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(optimizer, state_dict)`` after :meth:`state_dict`; a returned dict replaces it."""
        return _register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(optimizer, state_dict)`` before loading; a returned dict is loaded instead."""
        return _register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(optimizer)`` after :meth:`load_state_dict`."""
        return _register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # -- state dicts -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state: ``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``.

        Parameters are replaced by their index in group order, as in PyTorch; groups built
        from named parameters also hold ``"param_names"``. The tensors are the live state
        (not copies); ``corenn.save`` writes the dict as it is.

        Example::

            >>> opt = corenn.optim.SGD(model.named_parameters(), lr=0.1, momentum=0.9)
            >>> corenn.save(opt.state_dict(), "opt.safetensors")
        """
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        index_of: dict[int, int] = {}
        start = 0
        packed_groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                index_of.setdefault(id(p), i)
            packed["params"] = [index_of[id(p)] for p in group["params"]]
            if "param_names" in packed:
                packed["param_names"] = list(packed["param_names"])
            start += len(packed["params"])
            packed_groups.append(packed)
        packed_state = {(index_of[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        state_dict = {"state": packed_state, "param_groups": packed_groups}
        for hook in self._optimizer_state_dict_post_hooks.values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = False) -> OptimizerLoadResult:
        """Load state saved by :meth:`state_dict`; returns the names that did not match.

        When this optimizer and the saved state both carry parameter names (built from
        ``named_parameters()``), state is matched **by name**: a rebuilt model whose
        parameters moved, appeared or disappeared still gets the right state for each
        name. Names with no saved state (``missing_keys``) start fresh; saved names with
        no parameter (``unexpected_keys``) are dropped; both are returned and reported
        in a ``UserWarning`` -- or raise ``RuntimeError`` before anything is loaded when
        ``strict=True``. Without names on both sides, parameters are matched by
        position as in PyTorch, and group sizes must agree.

        Hyperparameters (``lr``, ``momentum``, ...) come from the saved groups, matched
        by position; state tensors are copied and converted to each parameter's
        dtype and device (except ``step``), so the loaded optimizer shares no memory
        with ``state_dict``.

        Example::

            >>> opt = corenn.optim.Adam(model.named_parameters())
            >>> result = opt.load_state_dict(corenn.load("opt.safetensors"))
            >>> result.missing_keys, result.unexpected_keys
            ([], [])
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"optimizer state_dict must be a dict, got {type(state_dict).__name__}")
        state_dict = dict(state_dict)  # shallow copy: hooks may edit it
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        for key in ("state", "param_groups"):
            if key not in state_dict:
                raise ValueError(f"optimizer state_dict has no {key!r} entry: expected the dict returned by "
                                 f"Optimizer.state_dict(), got keys {sorted(map(str, state_dict))}")
        groups = self.param_groups
        saved_groups = [dict(g) for g in state_dict["param_groups"]]
        saved_state = state_dict["state"]
        if len(groups) != len(saved_groups):
            raise ValueError(f"loaded state dict has a different number of parameter groups "
                             f"({len(saved_groups)} saved, {len(groups)} in this optimizer)")

        by_name = all("param_names" in g for g in groups) and all("param_names" in g for g in saved_groups)
        missing: list = []
        unexpected: list = []
        if by_name:
            saved_index = {}
            for g in saved_groups:
                saved_index.update(zip(g["param_names"], g["params"]))
            current = {}
            for g in groups:
                current.update(zip(g["param_names"], g["params"]))
            id_map = {}
            label = {}
            for name, p in current.items():
                if name in saved_index:
                    id_map[saved_index[name]] = p
                    label[saved_index[name]] = name
                else:
                    missing.append(name)
            unexpected = [name for name in saved_index if name not in current]
        else:
            for i, (g, sg) in enumerate(zip(groups, saved_groups)):
                if len(g["params"]) != len(sg["params"]):
                    raise ValueError(f"loaded state dict contains a parameter group that doesn't match the size of "
                                     f"optimizer's group (group {i}: {len(sg['params'])} saved parameters, "
                                     f"{len(g['params'])} here)")
            saved_ids = list(chain.from_iterable(g["params"] for g in saved_groups))
            id_map = dict(zip(saved_ids, chain.from_iterable(g["params"] for g in groups)))
            label = {k: f"#{k}" for k in saved_ids}

        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: missing parameters "
                               f"{missing}, unexpected parameters {unexpected}")

        new_state: defaultdict = defaultdict(dict)
        for key, value in saved_state.items():
            if key in id_map:
                param = id_map[key]
                if not isinstance(value, dict):
                    raise TypeError(f"optimizer state for parameter {label[key]} must be a dict, "
                                    f"got {type(value).__name__}")
                new_state[param] = {k: _cast_state(param, k, v, label[key], k not in self._reduced_state_keys)
                                    for k, v in value.items()}
            elif not by_name:
                new_state[key] = value  # state not tied to a parameter is kept as is (PyTorch does the same)

        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved = {k: v for k, v in saved.items() if k not in ("params", "param_names")}
            saved["params"] = group["params"]
            if "param_names" in group:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        self.__setstate__({"state": new_state, "param_groups": new_groups})
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)

        if missing or unexpected:
            warnings.warn(f"{type(self).__name__}.load_state_dict matched parameters by name; no saved state for "
                          f"{missing} (they start fresh), saved state without a parameter here: {unexpected} "
                          "(dropped)", UserWarning, stacklevel=2)
        return OptimizerLoadResult(missing, unexpected)


def _register(hooks: OrderedDict, hook, prepend: bool) -> RemovableHandle:
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _cast_state(param: Tensor, key, value, label: str, param_shaped: bool = True):
    """A private copy of one saved state value, on the parameter's device and (except ``step``) dtype."""
    if isinstance(value, Tensor):
        if key == "step":
            return value.clone()
        if param_shaped and value.ndim > 0 and tuple(value.shape) != tuple(param.shape):
            raise RuntimeError(f"loaded optimizer state {key!r} for parameter {label} has shape {list(value.shape)}, "
                               f"but the parameter has shape {list(param.shape)}")
        if param.is_floating_point():
            value = value.to(device=param.device, dtype=param.dtype)
        else:
            value = value.to(device=param.device)
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cast_state(param, k, v, label) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, None, v, label) for v in value)
    return value
