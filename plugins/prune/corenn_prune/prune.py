"""``corenn.nn.utils.prune``: PyTorch's pruning API on corenn's computed attributes (mirrors ``torch.nn.utils.prune``).

Pruning ``module.weight`` moves the parameter to ``module.weight_orig``, stores a 0/1
``module.weight_mask`` buffer, and makes ``module.weight`` read as
``weight_orig * weight_mask`` -- the state-dict keys PyTorch uses, so pruned checkpoints
move between corenn and PyTorch. Gradients reach ``weight_orig`` masked.

Unlike PyTorch, ``module.weight`` is not a tensor stored by a forward pre-hook but a
computed attribute of the core's ``Module`` (``Module.register_computed_attribute``),
recomputed at every read. So a pruned module holds the original and the mask, not also
a third dense copy; it deep-copies, pickles and saves; and ``module.weight`` is current
before the first forward and after an optimizer step. The pruning method is still listed
in ``module._forward_pre_hooks`` (where PyTorch's tutorial reads the pruning history);
calling it does nothing.

Example::

    >>> from corenn import nn
    >>> import corenn.nn.utils.prune as prune
    >>> layer = prune.l1_unstructured(nn.Linear(4, 3), "weight", amount=0.5)
    >>> sorted(layer.state_dict())
    ['bias', 'weight_mask', 'weight_orig']
    >>> int((layer.weight == 0).sum())
    6
    >>> prune.remove(layer, "weight")
    Linear(in_features=4, out_features=3, bias=True)
"""
from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

import corenn
from corenn_prune._selection import topk_indices

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "random_structured", "ln_structured", "global_unstructured", "custom_from_mask",
           "remove", "is_pruned", "pruning_method", "PrunedTensor"]


# -- moving values between tensors and numpy ------------------------------------------------------------

def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def _tensor_like(array: np.ndarray, like, dtype=None):
    """A corenn tensor holding ``array`` with ``like``'s dtype (or ``dtype``) and device."""
    return corenn.tensor(np.ascontiguousarray(array), dtype=dtype or like.dtype, device=like.device)


# -- the computed attribute ------------------------------------------------------------------------------

class PrunedTensor:
    """How a pruned module computes ``module.<name>``: its pruning method's ``apply_mask(module)``.

    Registered with ``Module.register_computed_attribute``; it holds the pruning method (a
    :class:`PruningContainer` after iterative pruning) and the handle of the method's entry
    in ``module._forward_pre_hooks``. Module-level class, so pruned modules pickle.

    Example::

        >>> layer = prune.identity(nn.Linear(2, 2), "weight")
        >>> type(layer.computed_attribute("weight").compute).__name__
        'PrunedTensor'
    """

    def __init__(self, method: "BasePruningMethod", hook_handle) -> None:
        self.method = method
        self.hook_handle = hook_handle

    def __call__(self, module):
        return self.method.apply_mask(module)

    def assign(self, module, value) -> None:
        name = self.method._tensor_name
        raise AttributeError(f"can't assign to '{name}' of a pruned {type(module).__name__}: it is computed as "
                             f"{name}_orig * {name}_mask. Assign to {name}_orig (or its .data), change {name}_mask, "
                             f"or call prune.remove(module, '{name}') first")

    def __repr__(self):
        return f"PrunedTensor({self.method!r})"


def _pruned_tensor(module, name: str) -> PrunedTensor | None:
    if name not in module.computed_attribute_names():
        return None
    compute = module.computed_attribute(name).compute
    return compute if isinstance(compute, PrunedTensor) else None


def pruning_method(module, name: str) -> "BasePruningMethod | None":
    """The pruning method acting on ``module.<name>`` (a :class:`PruningContainer` after several rounds), or None.

    The public way to read the pruning history that PyTorch's tutorial digs out of
    ``module._forward_pre_hooks``.

    Example::

        >>> layer = prune.l1_unstructured(nn.Linear(4, 4), "weight", amount=2)
        >>> layer = prune.ln_structured(layer, "weight", amount=1, n=2, dim=0)
        >>> [type(m).__name__ for m in prune.pruning_method(layer, "weight")]
        ['L1Unstructured', 'LnStructured']
    """
    pruned = _pruned_tensor(module, name)
    return pruned.method if pruned is not None else None


# -- the methods -----------------------------------------------------------------------------------------

class BasePruningMethod(ABC):
    """Base class of pruning methods: subclass it and define ``compute_mask(t, default_mask)``.

    ``PRUNING_TYPE`` (``"unstructured"``, ``"structured"`` -- with a ``dim`` attribute -- or
    ``"global"``) tells :class:`PruningContainer` which part of the tensor a later round
    acts on. ``apply`` prunes a module's tensor; ``prune`` returns a pruned copy of a tensor;
    ``remove`` makes the pruning permanent.

    Example::

        >>> class EveryOther(prune.BasePruningMethod):
        ...     PRUNING_TYPE = "unstructured"
        ...     def compute_mask(self, t, default_mask):
        ...         mask = default_mask.clone()
        ...         mask.view(-1)[::2] = 0
        ...         return mask
        >>> layer = EveryOther.apply(nn.Linear(3, 2), "weight")   # doctest: +SKIP
    """

    _tensor_name: str | None = None
    PRUNING_TYPE: str

    def __call__(self, module, inputs):
        """The forward pre-hook PyTorch runs before each forward; here ``module.<name>`` is computed when read, so nothing to do."""
        return None

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask for ``t`` (importance scores), on top of ``default_mask`` (ones if not pruned before); same shape as ``t``."""

    def apply_mask(self, module):
        """``module.<name>_orig`` times ``module.<name>_mask`` (cast to the original's dtype): the pruned tensor."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with ``cls(*args, **kwargs)``, on top of any pruning it already has; returns the method.

        The first time, the parameter moves to ``<name>_orig`` and ``<name>_mask`` is
        registered; later rounds combine into a :class:`PruningContainer`, so their amounts
        apply to what is still unpruned. If computing the mask fails, the module is left as
        it was.
        """
        method = cls(*args, **kwargs)
        method._tensor_name = name
        existing = _pruned_tensor(module, name)
        if existing is not None:
            old = existing.method
            if isinstance(old, PruningContainer):
                old.add_pruning_method(method)
                combined = old
            else:
                combined = PruningContainer(old)
                combined.add_pruning_method(method)
        else:
            combined = method

        orig = getattr(module, name)
        if importance_scores is not None:
            if importance_scores.shape != orig.shape:
                raise AssertionError(f"importance_scores should have the same shape as parameter {name} of {module}, "
                                     f"got {importance_scores.shape} vs {orig.shape}")
        else:
            importance_scores = orig

        if existing is None:
            if not isinstance(orig, corenn.nn.Parameter):
                raise TypeError(f"{cls.__name__}.apply(): '{name}' of {type(module).__name__} must be a parameter to "
                                f"be pruned, got {type(orig).__name__}")
            default_mask = corenn.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = combined.compute_mask(importance_scores, default_mask=default_mask)
        except BaseException:
            if existing is not None and combined is existing.method:
                combined.remove_last()   # the container was the module's already: leave its history as it was
            raise

        if existing is None:
            # PyTorch's order: name_orig joins the parameters (at the end), then name leaves them.
            module.register_parameter(name + "_orig", orig)
            delattr(module, name)
            module.register_buffer(name + "_mask", mask)
            pruned = PrunedTensor(method, module.register_forward_pre_hook(method))
            module.register_computed_attribute(name, pruned, pruned.assign)
        else:
            with corenn.no_grad():
                getattr(module, name + "_mask").data = mask
            # PyTorch removes the old hook and registers the combined one last.
            existing.hook_handle.remove()
            existing.hook_handle = module.register_forward_pre_hook(combined)
            existing.method = combined
        return combined

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` times the mask this method computes for it (from ``importance_scores`` when given)."""
        if importance_scores is not None:
            if importance_scores.shape != t.shape:
                raise AssertionError("importance_scores should have the same shape as tensor t, "
                                     f"got {importance_scores.shape} vs {t.shape}")
        else:
            importance_scores = t
        default_mask = default_mask if default_mask is not None else corenn.ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module) -> None:
        """Make the pruning permanent: ``<name>`` becomes a plain parameter holding ``orig * mask``; ``_orig``/``_mask`` go.

        The parameter is the object that was ``<name>_orig`` (so optimizers holding it keep
        working), as in PyTorch.
        """
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        name = self._tensor_name
        with corenn.no_grad():
            weight = self.apply_mask(module)
        pruned = _pruned_tensor(module, name)
        if pruned is not None:
            module.remove_computed_attribute(name)
            pruned.hook_handle.remove()
        orig = getattr(module, name + "_orig")
        orig.data = weight.data
        delattr(module, name + "_orig")
        delattr(module, name + "_mask")
        setattr(module, name, orig)


class PruningContainer(BasePruningMethod):
    """The pruning methods applied to one tensor, in order; the last one decides the next mask.

    A later method acts on what earlier ones left: an unstructured method on the entries
    still unpruned, a structured one on the channels not yet entirely pruned, a global one
    on everything.

    Example::

        >>> container = prune.pruning_method(layer, "weight")   # doctest: +SKIP
        >>> list(container)                                    # doctest: +SKIP
    """

    def __init__(self, *args) -> None:
        self._pruning_methods: tuple = ()
        if not isinstance(args, Iterable):   # kept from PyTorch's signature handling
            self._tensor_name = args._tensor_name
            self.add_pruning_method(args)
        elif len(args) == 1:
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method) -> None:
        """Append ``method`` (a :class:`BasePruningMethod` for the same tensor name)."""
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        elif method is not None and self._tensor_name != method._tensor_name:
            raise ValueError("Can only add pruning methods acting on "
                             f"the parameter named '{self._tensor_name}' to PruningContainer {self}."
                             f" Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def remove_last(self) -> None:
        """Drop the last method (used to undo a round whose mask could not be computed)."""
        self._pruning_methods = self._pruning_methods[:-1]

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        """``default_mask`` with the last method's mask computed on the part of ``t`` it may still prune."""
        method = self._pruning_methods[-1]
        scores = _numpy(t)
        new_mask = _numpy(default_mask).astype(scores.dtype, copy=True)
        if method.PRUNING_TYPE == "unstructured":
            where = new_mask == 1
        elif method.PRUNING_TYPE == "structured":
            if not hasattr(method, "dim"):
                raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have the attribute `dim` '
                                     "defined.")
            n_dims = scores.ndim
            dim = method.dim
            if dim < 0:
                dim = n_dims + dim
            if dim < 0:
                raise IndexError(f"Index is out of bounds for tensor with dimensions {n_dims}")
            other_dims = tuple(d for d in range(n_dims) if d != dim)
            keep_channel = new_mask.sum(axis=other_dims) != 0
            where = tuple(keep_channel if d == dim else slice(None) for d in range(n_dims))
        elif method.PRUNING_TYPE == "global":
            where = tuple(slice(None) for _ in range(scores.ndim))
        else:
            raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")
        partial = method.compute_mask(_tensor_like(scores[where], t), default_mask=_tensor_like(new_mask[where], t))
        new_mask[where] = _numpy(partial).astype(new_mask.dtype)
        return _tensor_like(new_mask, t)


class Identity(BasePruningMethod):
    """Prunes nothing: the reparametrization with a mask of ones."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


def _prune_entries(amount, t, default_mask, scores, largest: bool):
    """``default_mask`` with the ``amount`` entries of ``t`` that score highest (``largest``) or lowest zeroed.

    ``scores()`` is called only when something is pruned: RandomUnstructured draws its scores
    from the RNG, and PyTorch draws nothing for an amount of zero.
    """
    tensor_size = t.numel()
    nparams_toprune = _compute_nparams_toprune(amount, tensor_size)
    _validate_pruning_amount(nparams_toprune, tensor_size)
    mask = _numpy(default_mask).copy()
    if nparams_toprune != 0:
        mask.reshape(-1)[topk_indices(scores().ravel(), nparams_toprune, largest=largest)] = 0
    return _tensor_like(mask, default_mask)


class RandomUnstructured(BasePruningMethod):
    """Prune ``amount`` (a fraction, or a count) of the currently unpruned entries at random (corenn's RNG)."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        return _prune_entries(self.amount, t, default_mask, lambda: _numpy(corenn.rand_like(t)), largest=True)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(BasePruningMethod):
    """Prune the ``amount`` currently unpruned entries of smallest absolute value (ties broken as PyTorch's topk)."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        return _prune_entries(self.amount, t, default_mask, lambda: np.abs(_numpy(t)), largest=False)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


def _channel_slices(ndim: int, dim: int, index):
    dim = dim % ndim   # dim=-1 is the last dim
    return tuple(index if d == dim else slice(None) for d in range(ndim))


class RandomStructured(BasePruningMethod):
    """Prune ``amount`` whole channels along ``dim`` at random (corenn's RNG), on top of the default mask."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount
        self.dim = dim

    def compute_mask(self, t, default_mask):
        _validate_structured_pruning(t)
        _validate_pruning_dim(t, self.dim)
        tensor_size = t.shape[self.dim]
        nparams_toprune = _compute_nparams_toprune(self.amount, tensor_size)
        _validate_pruning_amount(nparams_toprune, tensor_size)
        if nparams_toprune == 0:
            return default_mask
        prob = _numpy(corenn.rand(tensor_size))
        threshold = np.partition(prob, nparams_toprune - 1)[nparams_toprune - 1]   # kthvalue
        mask = np.zeros(tuple(t.shape), dtype=_numpy(t).dtype)
        mask[_channel_slices(mask.ndim, self.dim, prob > threshold)] = 1
        mask *= _numpy(default_mask).astype(mask.dtype)
        return _tensor_like(mask, t)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prune the ``amount`` channels along ``dim`` of smallest L``n`` norm (``n`` as ``p`` of ``corenn.norm``)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount
        self.n = n
        self.dim = dim

    def compute_mask(self, t, default_mask):
        _validate_structured_pruning(t)
        _validate_pruning_dim(t, self.dim)
        tensor_size = t.shape[self.dim]
        nparams_toprune = _compute_nparams_toprune(self.amount, tensor_size)
        nparams_tokeep = tensor_size - nparams_toprune
        _validate_pruning_amount(nparams_toprune, tensor_size)
        norm = _compute_norm(_numpy(t), self.n, self.dim)
        if nparams_toprune == 0:
            return default_mask
        keep = topk_indices(norm, nparams_tokeep, largest=True)
        mask = np.zeros(tuple(t.shape), dtype=_numpy(t).dtype)
        mask[_channel_slices(mask.ndim, self.dim, keep)] = 1
        mask *= _numpy(default_mask).astype(mask.dtype)
        return _tensor_like(mask, t)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prune with a given 0/1 ``mask`` (on top of the default mask).

    Once applied, the method lets go of ``mask``: the module's ``<name>_mask`` buffer holds
    it, so it is stored once (PyTorch keeps a second copy inside the hook).
    """

    PRUNING_TYPE = "global"

    def __init__(self, mask) -> None:
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if self.mask is None:
            raise RuntimeError("CustomFromMask.compute_mask(): this method was applied already and let go of its "
                               "mask (the module's <name>_mask buffer holds it); make a new CustomFromMask")
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise AssertionError(f"default_mask shape {default_mask.shape} must match self.mask shape "
                                 f"{self.mask.shape}")
        mask = _numpy(default_mask) * _numpy(corenn.as_tensor(self.mask)).astype(_numpy(default_mask).dtype)
        return _tensor_like(mask, default_mask)

    @classmethod
    def apply(cls, module, name, mask):
        combined = super().apply(module, name, mask=mask)
        applied = combined[-1] if isinstance(combined, PruningContainer) else combined
        applied.mask = None
        return combined


# -- the functions ---------------------------------------------------------------------------------------

def identity(module, name):
    """Reparametrize ``module.<name>`` as ``<name>_orig * <name>_mask`` with a mask of ones; returns ``module``.

    Example::

        >>> prune.identity(nn.Linear(2, 3), "bias").bias_mask
        tensor([1., 1., 1.])
    """
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` (fraction or count) of ``module.<name>``'s unpruned entries at random; returns ``module``.

    Example::

        >>> int((prune.random_unstructured(nn.Linear(2, 3), "weight", amount=1).weight_mask == 0).sum())
        1
    """
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` unpruned entries of ``module.<name>`` of smallest magnitude; returns ``module``.

    ``importance_scores`` (same shape) replaces the tensor's values when ranking.

    Example::

        >>> layer = prune.l1_unstructured(nn.Linear(10, 10), "weight", amount=0.3)
        >>> int((layer.weight_mask == 0).sum())
        30
    """
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune ``amount`` channels of ``module.<name>`` along ``dim`` at random; returns ``module``.

    Example::

        >>> layer = prune.random_structured(nn.Linear(4, 6), "weight", amount=2, dim=0)
        >>> int((layer.weight_mask.sum(1) == 0).sum())
        2
    """
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` channels of ``module.<name>`` along ``dim`` of smallest L``n`` norm; returns ``module``.

    Example::

        >>> layer = prune.ln_structured(nn.Conv2d(5, 4, 2), "weight", amount=0.5, n=2, dim=0)
        >>> int((layer.weight_mask.sum((1, 2, 3)) == 0).sum())
        2
    """
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune the ``(module, name)`` tensors in ``parameters`` together: one ranking across all of them.

    ``pruning_method`` is an unstructured method class (``prune.L1Unstructured``), its
    arguments (``amount=...``) are ``kwargs``; ``importance_scores`` maps ``(module, name)``
    to scores replacing that tensor's values.

    Example::

        >>> net = nn.Sequential(nn.Linear(10, 4), nn.Linear(4, 1))
        >>> prune.global_unstructured([(net[0], "weight"), (net[1], "weight")],
        ...                           pruning_method=prune.L1Unstructured, amount=10)
        >>> int(sum((m.weight_mask == 0).sum() for m in net))
        10
    """
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    scores = np.concatenate([_numpy(importance_scores.get((module, name), getattr(module, name))).ravel()
                             for module, name in parameters]) if parameters else np.zeros(0, np.float32)
    default_mask = np.concatenate([
        _numpy(getattr(module, name + "_mask")).ravel() if hasattr(module, name + "_mask")
        else np.ones(getattr(module, name).numel(), dtype=scores.dtype)
        for module, name in parameters]) if parameters else np.zeros(0, np.float32)
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
                        f"Found method {pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    final_mask = _numpy(container.compute_mask(corenn.from_numpy(scores), corenn.from_numpy(default_mask)))
    pointer = 0
    for module, name in parameters:
        param = getattr(module, name)
        count = param.numel()
        custom_from_mask(module, name, mask=_tensor_like(final_mask[pointer:pointer + count].reshape(tuple(param.shape)),
                                                         param))
        pointer += count


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` with the 0/1 ``mask`` (on top of earlier pruning); returns ``module``.

    Example::

        >>> prune.custom_from_mask(nn.Linear(5, 3), name="bias", mask=corenn.tensor([0, 1, 0])).bias_mask
        tensor([0., 1., 0.])
    """
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module, name):
    """Make the pruning of ``module.<name>`` permanent: a plain parameter again, with the pruned entries zero.

    ``ValueError`` if it is not pruned. Returns ``module``.

    Example::

        >>> layer = prune.remove(prune.random_unstructured(nn.Linear(5, 7), "weight", amount=0.2), "weight")
        >>> sorted(layer.state_dict())
        ['bias', 'weight']
    """
    pruned = _pruned_tensor(module, name)
    if pruned is None:
        raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")
    pruned.method.remove(module)
    return module


def is_pruned(module) -> bool:
    """Whether ``module`` or any submodule has a pruned tensor.

    Example::

        >>> m = nn.Linear(5, 7)
        >>> prune.is_pruned(m)
        False
        >>> prune.is_pruned(prune.random_unstructured(m, name="weight", amount=0.2))
        True
    """
    return any(_pruned_tensor(submodule, name) is not None
               for _, submodule in module.named_modules() for name in submodule.computed_attribute_names())


# -- validation, as PyTorch's -----------------------------------------------------------------------------

def _validate_pruning_amount_init(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and (float(amount) > 1.0 or float(amount) < 0.0)):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")


def _validate_pruning_amount(amount, tensor_size) -> None:
    if isinstance(amount, numbers.Integral) and amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to prune={tensor_size}")


def _validate_structured_pruning(t) -> None:
    shape = t.shape
    if len(shape) <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. Found tensor of shape "
                         f"{shape} with {len(shape)} dims")


def _compute_nparams_toprune(amount, tensor_size):
    if isinstance(amount, numbers.Integral):
        return amount
    return round(amount * tensor_size)


def _validate_pruning_dim(t, dim) -> None:
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _compute_norm(t: np.ndarray, n, dim: int) -> np.ndarray:
    """The L``n`` norm of every channel along ``dim`` (over all other dims), in float64, as ``torch.norm(p=n)``."""
    dims = list(range(t.ndim))
    if dim < 0:
        dim = dims[dim]
    dims.remove(dim)
    x = np.moveaxis(t.astype(np.float64), dim, 0).reshape(t.shape[dim], -1)
    if n == "fro" and len(dims) > 2:
        # torch.norm(p="fro") over more than 2 dims is a matrix norm there, and refuses
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dims))} "
                           "(ln_structured(): n='fro' needs a tensor of at most 3 dims; use n=2)")
    if n == "fro" or n == 2:
        return np.sqrt((x * x).sum(axis=1))
    if n == "nuc":
        if len(dims) != 2:
            raise RuntimeError(f"ln_structured(): n='nuc' needs a tensor of 3 dims (the channel dim and a matrix), "
                               f"got {t.ndim} dims")
        matrices = np.moveaxis(t.astype(np.float64), dim, 0)
        return np.linalg.norm(matrices, ord="nuc", axis=(1, 2))
    if isinstance(n, str) or not isinstance(n, numbers.Real):
        raise ValueError(f"ln_structured(): n must be a number, inf, -inf, 'fro' or 'nuc', got {n!r}")
    a = np.abs(x)
    if n == float("inf"):
        return a.max(axis=1)
    if n == float("-inf"):
        return a.min(axis=1)
    if n == 0:
        return (a != 0).sum(axis=1).astype(np.float64)
    if n == 1:
        return a.sum(axis=1)
    return (a ** n).sum(axis=1) ** (1.0 / n)
