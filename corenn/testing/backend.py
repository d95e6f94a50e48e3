"""``check_backend``: test a device backend against the protocol of ``docs/writing-plugins.md``.

A backend author runs it once, next to ``run_conformance``::

    >>> from corenn.testing.backend import check_backend
    >>> check_backend("cpu")

It raises :class:`BackendProtocolError` listing every part of the protocol the backend
misses: the array protocol (:data:`corenn.dispatch.ARRAY_PROTOCOL`), ``xp.ndarray``,
transfers (host -> device -> host, and between indices), device indices, and the RNG
object (:data:`corenn.dispatch.RNG_METHODS`, a JSON-serialisable state).
"""
from __future__ import annotations

import json

import numpy as np

from corenn import dispatch

__all__ = ["check_backend", "BackendProtocolError"]


class BackendProtocolError(AssertionError):
    """A backend does not follow the device-backend protocol; the message lists each gap."""


def check_backend(device_type: str) -> None:
    """Check the registered backend of ``device_type`` against the protocol; raise listing what is wrong."""
    backend = dispatch.get_backend(device_type)
    problems = []
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    count = backend.device_count()
    indexed = backend.default_index is not None
    indices = list(range(count)) if indexed else [None]
    if indexed and not 0 <= backend.current_index() < max(count, 1):
        problems.append(f"current index {backend.current_index()} is not in range(device_count()={count})")
    if not isinstance(getattr(backend.xp, "ndarray", None), type):
        problems.append("xp.ndarray is not the device's array class")
    for index in indices:
        array = backend.to_device(host, index)
        where = f"index {index}" if indexed else "the device"
        if not isinstance(array, backend.xp.ndarray):
            problems.append(f"to_device gave a {type(array).__name__}, not an xp.ndarray, on {where}")
            continue
        if indexed and backend.array_device_index(array) != index:
            problems.append(f"to_device(array, {index}) put the array on index {backend.array_device_index(array)}")
        missing = [name for name in dispatch.ARRAY_PROTOCOL if not hasattr(array, name)]
        if missing:
            problems.append(f"device arrays lack {', '.join(missing)}")
        elif (array.shape, array.dtype, array.ndim, array.size) != (host.shape, host.dtype, host.ndim, host.size):
            problems.append("device arrays report another shape, dtype, ndim or size than the host array they copy")
        back = backend.to_host(array)
        if not isinstance(back, np.ndarray) or not np.array_equal(back, host):
            problems.append(f"to_host(to_device(x)) is not x as a numpy array on {where}")
            continue
        device = dispatch.device(device_type, index)
        made = device._xp.zeros((2,), dtype=np.float32)
        if indexed and backend.array_device_index(made) != index:
            problems.append(f"xp.zeros for {device} made an array on index {backend.array_device_index(made)}; "
                            "give the backend xp_for_index")
        total = device._xp.sum(array * 2 + 1)
        # numpy's reductions give numpy scalars, which the core turns into 0-d arrays; any other
        # backend must give 0-d device arrays (a numpy scalar would be data silently on the host).
        if not isinstance(total, backend.xp.ndarray) and not (backend.xp is np and isinstance(total, np.generic)):
            problems.append(f"a reduction returned a {type(total).__name__}, not a 0-d device array")
        elif total.item() != float(host.sum() * 2 + 6):
            problems.append("arithmetic on device arrays gave a wrong value")
        for other in indices:
            if other is not None and other != index:
                moved = backend.to_device(array, other)
                if backend.array_device_index(moved) != other or not np.array_equal(backend.to_host(moved), host):
                    problems.append(f"to_device of an index-{index} array to index {other} did not copy it there")
    if indexed:
        problems += _check_rng(backend, indices)
    elif backend.random_generator is not None:
        problems += _check_rng(backend, [None])
    if problems:
        raise BackendProtocolError(f"backend {device_type!r} does not follow the device protocol:\n- "
                                   + "\n- ".join(problems))


def _check_rng(backend, indices) -> list:
    if backend.random_generator is None:
        return ["random_generator is None: corenn.randn, dropout and nn.init need it"]
    rng = backend.random_generator(0)
    missing = [name for name in dispatch.RNG_METHODS if not callable(getattr(rng, name, None))]
    if missing:
        return [f"the RNG object lacks {', '.join(missing)}"]
    problems = []
    holder = getattr(rng, "bit_generator", rng)
    try:
        state = holder.state
        json.dumps(state, default=int)
    except (AttributeError, TypeError) as error:
        return [f"the RNG state (rng.bit_generator.state or rng.state) is not readable as JSON: {error}"]
    for index in indices:
        with backend.device_guard(index):
            draw = rng.standard_normal((3,), dtype=np.float32)
        if not isinstance(draw, backend.xp.ndarray):
            problems.append(f"rng.standard_normal gave a {type(draw).__name__}, not a device array")
        elif index is not None and backend.array_device_index(draw) != index:
            problems.append(f"random draws under device_guard({index}) landed on index "
                            f"{backend.array_device_index(draw)}")
    holder.state = state
    first = backend.to_host(rng.random((4,)))
    holder.state = state
    if not np.array_equal(first, backend.to_host(rng.random((4,)))):
        problems.append("assigning the RNG state back does not replay the same numbers")
    return problems
