"""Turning a list of samples into a batch (``default_collate``) and a single
sample's arrays into tensors (``default_convert``), as PyTorch does.

Extend ``default_collate`` for a type of your own by adding to
``default_collate_fn_map``, or call ``collate(batch, collate_fn_map=...)``.
"""
from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from . import _core

__all__ = ["default_collate", "default_convert", "collate", "default_collate_fn_map"]

# numpy dtype kinds that cannot become tensors: bytes, unicode, object.
_STR_OBJ_KINDS = re.compile(r"[SaUO]")
_ERR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _rebuild_mapping(elem, items: dict):
    """A mapping of ``elem``'s type holding ``items`` (falling back to dict)."""
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)  # keeps OrderedDict/defaultdict and their extras
            clone.update(items)
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def _rebuild_sequence(elem, items: list):
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for i, x in enumerate(items):
                clone[i] = x
            return clone
        return type(elem)(items)
    except TypeError:
        return items


def default_convert(data):
    """Convert numpy arrays and numpy scalars inside ``data`` to tensors,
    keeping everything else (the ``collate_fn`` when batching is off).

    Example::

        default_convert({"x": np.array([0, 1]), "name": "a"})
        # {'x': tensor([0, 1]), 'name': 'a'}
    """
    if _core.is_tensor(data):
        return data
    if isinstance(data, np.ndarray):
        return data if _STR_OBJ_KINDS.search(data.dtype.str) else _core.as_tensor(data)
    if isinstance(data, (np.bool_, np.number)):
        return _core.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {k: default_convert(data[k]) for k in data})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]  # a list, as in PyTorch
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return _core.stack(batch)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if _STR_OBJ_KINDS.search(elem.dtype.str):
        raise TypeError(_ERR.format(elem.dtype))
    shape = elem.shape
    for i, b in enumerate(batch):
        if b.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {shape} at entry 0 "
                               f"and {b.shape} at entry {i}")
    # np.stack promotes mixed dtypes; PyTorch's stack would refuse or promote the same way.
    return _core.from_numpy(np.stack(batch))


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return _core.as_tensor(np.array(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return _core.tensor(batch, dtype="float64")


def collate_int_fn(batch, *, collate_fn_map=None):
    return _core.tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


# corenn.Tensor is not a key here because the core may still be importing
# when this module loads; ``_lookup`` handles tensors (a user may still add
# ``default_collate_fn_map[corenn.Tensor] = my_fn`` to override).
default_collate_fn_map: dict = {
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def _lookup(elem, collate_fn_map):
    fn = collate_fn_map.get(type(elem))
    if fn is not None:
        return fn
    if _core.is_tensor(elem):
        return collate_fn_map.get(_core.tensor_type(), collate_tensor_fn)
    for key, fn in collate_fn_map.items():
        if isinstance(elem, key):
            return fn
    return None


def collate(batch, *, collate_fn_map: dict | None = None):
    """Collate ``batch`` (a list of samples), dispatching on the type of its
    first element through ``collate_fn_map``, then recursing into mappings,
    named tuples and sequences.

    Example::

        collate([(1, "a"), (2, "b")], collate_fn_map=default_collate_fn_map)
        # [tensor([1, 2]), ['a', 'b']]
    """
    elem = batch[0]
    if collate_fn_map is not None:
        fn = _lookup(elem, collate_fn_map)
        if fn is not None:
            return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {k: collate([d[k] for d in batch], collate_fn_map=collate_fn_map)
                                       for k in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        for i, e in enumerate(batch):
            if len(e) != size:
                raise RuntimeError("each element in list of batch should be of equal size "
                                   f"(element 0 has {size} entries, element {i} has {len(e)})")
        columns = [collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return columns  # a list, as in PyTorch
        return _rebuild_sequence(elem, columns)
    raise TypeError(_ERR.format(type(elem)))


def default_collate(batch):
    """Stack a list of samples into a batch, keeping the samples' structure.

    tensors and numpy arrays → stacked tensor; float → float64 tensor;
    int → int64 tensor (bool → bool tensor); str/bytes → list unchanged;
    dict → dict of collated values; namedtuple → namedtuple of collated
    fields; list/tuple → list of collated columns.

    Example::

        default_collate([{"x": np.zeros(3), "y": 1}, {"x": np.ones(3), "y": 0}])
        # {'x': tensor of shape (2, 3), 'y': tensor([1, 0])}
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)
