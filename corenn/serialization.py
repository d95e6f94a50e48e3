"""Safe checkpoints: ``corenn.save`` and ``corenn.load`` on the safetensors format.

A corenn checkpoint is an ordinary `safetensors <https://github.com/huggingface/safetensors>`_
file. Its tensors sit under readable names (``fc.weight``, ``state.0.exp_avg``) so any
safetensors reader can use them, and the nested Python structure around them (dicts,
OrderedDicts, lists, tuples, numbers, strings, ``None``) is stored as one JSON document in
the file's ``__metadata__``::

    __metadata__ = {
        "corenn.format":    "1",
        "corenn.structure": '{"odict": [["fc.weight", {"tensor": "fc.weight", "id": 0}], ...]}',
        "corenn.checksum":  "crc32:1a2b3c4d",
    }

Unlike ``torch.save``, nothing is pickled: ``load`` parses JSON and raw tensor bytes and
never imports or executes anything named by the file, so loading an untrusted checkpoint
is safe. A damaged file raises :class:`CheckpointError`, never another exception.

Structure encoding (format 1). Every value becomes a JSON value:

* ``None``, ``bool``, ``int``, ``str`` -> themselves;
* ``float`` -> ``{"float": repr(x)}`` (exact, and covers ``inf`` / ``nan``, which JSON lacks);
* ``dict`` / ``OrderedDict`` -> ``{"dict": [[key, value], ...]}`` / ``{"odict": ...}`` -- a
  list of pairs, so int keys stay ints and order is kept;
* ``list`` / ``tuple`` -> ``{"list": [...]}`` / ``{"tuple": [...]}``;
* a tensor -> ``{"tensor": name, "id": n}``: ``name`` is the safetensors entry holding its
  data, ``n`` numbers distinct Tensor objects so that the same object comes back as the
  same object.

``corenn.checksum`` is a CRC-32 over the structure and every tensor's name, dtype, shape
and bytes; it turns accidental corruption anywhere in the file (a flipped bit in a weight,
an edited shape) into a :class:`CheckpointError` instead of silently wrong numbers. It is
not a signature: someone who can write the file can write a valid one.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import json
import math
import os
import secrets
import stat
import zlib
from typing import Any

import numpy as np
import safetensors.numpy

__all__ = ["save", "load", "CheckpointError", "FORMAT_VERSION"]

#: Version of the structure encoding written into ``__metadata__["corenn.format"]``.
FORMAT_VERSION = 1

_FORMAT_KEY = "corenn.format"
_STRUCTURE_KEY = "corenn.structure"
_CHECKSUM_KEY = "corenn.checksum"
_METADATA_KEY = "__metadata__"  # reserved by safetensors; never usable as a tensor name

# The safetensors library refuses headers above 100 MB; refusing them first keeps a
# corrupted length field from making us read or parse absurd amounts.
_MAX_HEADER_BYTES = 100_000_000
_MAX_NDIM = 64  # numpy's own limit

# safetensors dtype names <-> numpy dtypes, for the dtypes corenn has.
_SAFETENSORS_TO_NUMPY = {
    "F16": np.dtype(np.float16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "I8": np.dtype(np.int8),
    "I16": np.dtype(np.int16),
    "I32": np.dtype(np.int32),
    "I64": np.dtype(np.int64),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_NUMPY_TO_SAFETENSORS = {v: k for k, v in _SAFETENSORS_TO_NUMPY.items()}
# Names the safetensors format defines but corenn cannot hold; they get a clearer message
# than "unknown dtype" because the file itself is fine.
_UNSUPPORTED_SAFETENSORS_DTYPES = {
    "BF16", "U16", "U32", "U64", "C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2",
}

_SUPPORTED_VALUES = ("tensors, dict / OrderedDict (str or int keys), list, tuple, int, float, str, "
                     "bool and None")


class CheckpointError(RuntimeError):
    """A file is not a readable checkpoint: empty, truncated, corrupted or of another format.

    The message names the file and what is wrong, for example::

        CheckpointError: /tmp/x.ckpt: file is truncated (header says 4096 bytes of tensor
        data, file has 1000)

    Problems of the file system itself (a missing file, a directory, no permission) raise
    the usual ``OSError`` subclasses instead, as ``torch.load`` does.
    """


# --------------------------------------------------------------------------- save


def save(obj: Any, f) -> None:
    """Write ``obj`` to ``f`` as a safetensors checkpoint (mirrors ``torch.save``).

    ``obj`` may nest dicts (str or int keys), ``OrderedDict``, lists and tuples of tensors,
    ints, floats, strings, bools and ``None`` -- module and optimizer state dicts are of this
    kind. Parameters are stored as plain tensors; ``load`` returns them with
    ``requires_grad=False``. numpy integer and floating scalars are stored as Python
    ``int`` / ``float``. Anything else raises ``TypeError`` naming where it sits in ``obj``
    (e.g. ``obj['state'][3]['foo']``) before the file is touched.

    Shared tensors are stored once: two occurrences of the same Tensor object come back as
    one object, and two Tensor objects over the same memory (same data pointer, shape,
    strides and dtype) come back as two tensors viewing one array, so a write through one
    is seen through the other. Tensors that only *partially* overlap (a slice of another, a
    transposed view) are stored as separate copies and no longer share memory after
    loading. Tensors are stored contiguously; a non-contiguous tensor comes back
    contiguous with the same values.

    ``f`` is a path (``str`` or ``os.PathLike``) or a writable binary file object. A path is
    written atomically: the data goes to a temporary file ``.<name>.tmp-<pid>-<random>`` in
    the same directory, is flushed and fsync'ed, then renamed over ``f``; if the process
    dies midway the previous file at ``f`` is untouched (a stale temporary file may remain
    and can be deleted). A symlink at ``f`` is followed and its target replaced. A file
    object is simply written to, with no atomicity.

    Example::

        >>> model = corenn.nn.Linear(3, 2)
        >>> corenn.save(model.state_dict(), "model.safetensors")
        >>> state = corenn.load("model.safetensors")
        >>> list(state)
        ['weight', 'bias']
    """
    payload = _serialize(obj)
    if hasattr(f, "write"):
        f.write(payload)
        if hasattr(f, "flush"):
            f.flush()
        return
    try:
        path = os.fsdecode(os.fspath(f))
    except TypeError:
        raise TypeError(f"corenn.save: f must be a path (str or os.PathLike) or a writable binary "
                        f"file object, got {type(f).__name__}") from None
    _atomic_write(path, payload)


def _serialize(obj: Any) -> bytes:
    """The complete checkpoint file for ``obj`` as bytes."""
    encoder = _Encoder()
    structure = encoder.encode(obj, ())
    structure_json = json.dumps(structure, separators=(",", ":"), allow_nan=False)
    metadata = {
        _FORMAT_KEY: str(FORMAT_VERSION),
        _STRUCTURE_KEY: structure_json,
        _CHECKSUM_KEY: _checksum(structure_json, encoder.arrays),
    }
    return safetensors.numpy.save(encoder.arrays, metadata=metadata)


class _Encoder:
    """Turns a nested object into a JSON-able structure plus a dict of named arrays."""

    def __init__(self):
        import corenn

        self._tensor_type = corenn.Tensor
        self.arrays: dict[str, np.ndarray] = {}  # safetensors name -> C-contiguous host array
        self._by_object: dict[int, tuple[str, int]] = {}  # id(tensor) -> (name, object id)
        self._by_memory: dict[tuple, str] = {}  # memory key -> name
        self._containers_on_path: set[int] = set()  # ids of enclosing containers, for cycles

    def encode(self, value: Any, keys: tuple) -> Any:
        if value is None or isinstance(value, (bool, np.bool_)):
            return None if value is None else bool(value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            return {"float": repr(float(value))}
        if isinstance(value, str):
            return str(value)
        if isinstance(value, self._tensor_type):
            return self._encode_tensor(value, keys)
        kind = _CONTAINER_TAGS.get(type(value))
        if kind is None:
            hint = ""
            if isinstance(value, np.ndarray):
                hint = " (wrap numpy arrays with corenn.from_numpy)"
            raise TypeError(f"corenn.save cannot store {_short_repr(value)} of type "
                            f"{type(value).__qualname__!r} at {_format_path(keys)}{hint}; "
                            f"supported are {_SUPPORTED_VALUES}")
        if id(value) in self._containers_on_path:
            raise ValueError(f"corenn.save: {_format_path(keys)} contains itself (a reference cycle)")
        self._containers_on_path.add(id(value))
        try:
            if kind in ("dict", "odict"):
                items = []
                for key, item in value.items():
                    key = _check_key(key, keys)
                    items.append([key, self.encode(item, keys + (key,))])
                return {kind: items}
            return {kind: [self.encode(item, keys + (i,)) for i, item in enumerate(value)]}
        finally:
            self._containers_on_path.discard(id(value))

    def _encode_tensor(self, tensor, keys: tuple) -> dict:
        known = self._by_object.get(id(tensor))
        if known is not None:
            name, object_id = known
            return {"tensor": name, "id": object_id}
        object_id = len(self._by_object)
        memory_key = _memory_key(tensor)
        name = self._by_memory.get(memory_key) if memory_key is not None else None
        if name is None:
            array = _host_array(tensor)
            if array.dtype not in _NUMPY_TO_SAFETENSORS:
                raise TypeError(f"corenn.save cannot store a tensor of dtype {tensor.dtype} at "
                                f"{_format_path(keys)}")
            name = self._unique_name(keys)
            self.arrays[name] = array
            if memory_key is not None:
                self._by_memory[memory_key] = name
        self._by_object[id(tensor)] = (name, object_id)
        return {"tensor": name, "id": object_id}

    def _unique_name(self, keys: tuple) -> str:
        # State-dict keys joined with '.' (what PyTorch's safetensors files use); a collision
        # such as {'a.b': x, 'a': {'b': y}} gets a '~N' suffix -- the structure is
        # authoritative, names are only for other readers.
        base = ".".join(str(k) for k in keys) or "tensor"
        # safetensors names are UTF-8; a key with lone surrogates gets an escaped name.
        base = base.encode("utf-8", "backslashreplace").decode("utf-8")
        name, n = base, 0
        while name in self.arrays or name == _METADATA_KEY:
            n += 1
            name = f"{base}~{n}"
        return name


_CONTAINER_TAGS = {dict: "dict", collections.OrderedDict: "odict", list: "list", tuple: "tuple"}


def _check_key(key: Any, keys: tuple) -> str | int:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    raise TypeError(f"corenn.save cannot store dict key {_short_repr(key)} of type "
                    f"{type(key).__qualname__!r} at {_format_path(keys)}: keys must be str or int")


def _memory_key(tensor) -> tuple | None:
    """What identifies a tensor's memory: array type, data pointer, shape, strides, dtype."""
    array = getattr(tensor, "_data", None)
    if array is None:
        return None
    interface = getattr(array, "__array_interface__", None) or getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        return None
    pointer = interface["data"][0]
    return (type(array).__module__, type(array).__qualname__, pointer, tuple(array.shape),
            tuple(array.strides), str(array.dtype))


def _host_array(tensor) -> np.ndarray:
    """A C-contiguous numpy array with ``tensor``'s values (shares memory when it can)."""
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.to("cpu")
    array = np.asarray(data.numpy())
    # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones.
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    return array


def _atomic_write(path: str, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that readers see either the old or the new file."""
    if os.path.islink(path):
        path = os.path.realpath(path)
    directory, base = os.path.split(os.path.abspath(path))
    # Same directory so that os.replace is a rename within one file system; a leading dot
    # and the .tmp- infix keep it from looking like a checkpoint to globbing tools.
    temp = os.path.join(directory, f".{base[:200]}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        # Replacing a private (e.g. 0600) checkpoint must not make it readable by others.
        existing_mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        existing_mode = None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o666)
    try:
        if existing_mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, existing_mode)
        with os.fdopen(fd, "wb") as out:
            fd = None  # the file object owns it now
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    # Makes the rename itself durable; not every platform / file system supports it.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- load


def load(f, map_location=None, *, weights_only: bool | None = True):
    """Read a checkpoint written by :func:`save`, or any safetensors file (mirrors ``torch.load``).

    A corenn checkpoint comes back as the object that was saved: dicts, OrderedDicts,
    lists and tuples as such, int keys as ints, key order kept, floats exact (``inf`` and
    ``nan`` included), tied tensors tied (see :func:`save`). Tensors have
    ``requires_grad=False``.

    A safetensors file without corenn's structure -- e.g. written by PyTorch with
    ``safetensors.torch.save_file(model.state_dict(), path)`` -- comes back as a flat
    ``dict[str, Tensor]`` in file order, ready for ``module.load_state_dict``. Tensors of
    dtypes corenn lacks (``bfloat16``, ``uint32``, ...) raise :class:`CheckpointError`;
    convert them in PyTorch first (``{k: v.float() for k, v in sd.items()}``).

    Nothing in the file is ever executed: there is no pickle and no ``eval``. A file that is
    empty, truncated, corrupted, or of another format (a pickle, a zip such as a PyTorch
    ``.pt`` file, random bytes) raises :class:`CheckpointError` naming the file and the
    problem. A missing path raises ``FileNotFoundError`` and a directory
    ``IsADirectoryError``, as in PyTorch. The whole file is read into memory.

    Args:
        f: a path (``str`` / ``os.PathLike``) or a readable binary file object.
        map_location: ``None`` or ``'cpu'`` (tensors stay on the CPU), a device string such
            as ``'cuda:0'``, or a ``corenn.device``; tensors are moved with ``tensor.to``.
            Callables and dicts, which ``torch.load`` also takes, raise ``TypeError``.
        weights_only: accepted for PyTorch compatibility and ignored: corenn checkpoints
            hold only data, so loading is always as safe as ``weights_only=True``.

    Example::

        >>> corenn.save({"step": 3, "w": corenn.tensor([1.0, 2.0])}, "ckpt.safetensors")
        >>> corenn.load("ckpt.safetensors")
        {'step': 3, 'w': tensor([1., 2.])}
    """
    device = _resolve_map_location(map_location)
    data, where = _read_all(f)
    header = _parse_header(data, where)
    arrays = _decode_tensors(data, header, where)
    del data
    if not any(key.startswith("corenn.") for key in header.metadata):
        materializer = _Materializer(arrays, device)
        return {name: materializer.tensor(name) for name in arrays}
    return _load_structure(header.metadata, arrays, device, where)


def _resolve_map_location(map_location):
    if map_location is None:
        return None
    import corenn

    if isinstance(map_location, corenn.device):
        device = map_location
    elif isinstance(map_location, str):
        device = corenn.device(map_location)
    else:
        raise TypeError(f"corenn.load: map_location must be None, a device string such as 'cpu', or a "
                        f"corenn.device, got {type(map_location).__name__} (callables and dicts are "
                        f"not supported)")
    return None if device.type == "cpu" else device


def _read_all(f) -> tuple[bytes, str]:
    if hasattr(f, "read"):
        where = str(getattr(f, "name", None) or f"<{type(f).__name__}>")
        data = f.read()
        if isinstance(data, str):
            raise TypeError(f"corenn.load: {where} is open in text mode; open it with 'rb'")
        return bytes(data), where
    try:
        where = os.fsdecode(os.fspath(f))
    except TypeError:
        raise TypeError(f"corenn.load: f must be a path (str or os.PathLike) or a readable binary "
                        f"file object, got {type(f).__name__}") from None
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it changes nothing for
    # regular files. A missing file raises FileNotFoundError, as in PyTorch.
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb", closefd=True) as file:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), where)
        if not stat.S_ISREG(mode):
            # A FIFO or a device could block or never end.
            raise CheckpointError(f"{where}: not a regular file")
        return file.read(), where


class _Header:
    """The validated safetensors header: tensor entries in file order, and the metadata."""

    def __init__(self, entries: list[tuple[str, np.dtype, tuple, int, int]], metadata: dict[str, str]):
        self.entries = entries  # (name, numpy dtype, shape, begin, end), offsets into the data
        self.metadata = metadata


def _parse_header(data: bytes, where: str) -> _Header:
    """Check everything the safetensors format promises before any library reads it."""
    size = len(data)
    if size == 0:
        raise CheckpointError(f"{where}: file is empty")
    if data[8:9] != b"{":
        # Only now: a safetensors header length of e.g. 640 (0x280) also starts with the
        # bytes of a pickle's protocol-2 marker.
        _reject_known_foreign_formats(data, where)
    if size < 8:
        raise CheckpointError(f"{where}: file is truncated ({size} bytes; a safetensors file starts "
                              f"with an 8-byte header length)")
    header_length = int.from_bytes(data[:8], "little")
    if header_length < 2 or header_length > _MAX_HEADER_BYTES:
        raise CheckpointError(f"{where}: not a safetensors file (its first 8 bytes give a header "
                              f"length of {header_length}, outside 2..{_MAX_HEADER_BYTES})")
    if 8 + header_length > size:
        raise CheckpointError(f"{where}: file is truncated (header length says {header_length} bytes "
                              f"of header, file has {size - 8} after the length)")
    raw = data[8:8 + header_length]
    if raw[:1] != b"{":
        raise CheckpointError(f"{where}: not a safetensors file (header does not start with '{{')")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_pairs_without_duplicates,
                            parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{where}: corrupted header (not valid JSON: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: corrupted header (not a JSON object)")

    metadata = header.pop(_METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise CheckpointError(f"{where}: corrupted header (__metadata__ must map strings to strings)")

    entries = []
    for name, info in header.items():
        entries.append(_parse_entry(name, info, where))

    data_length = size - 8 - header_length
    expected = 0
    for name, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin != expected:
            problem = "overlaps the previous tensor" if begin < expected else "leaves a gap before it"
            raise CheckpointError(f"{where}: corrupted header (data_offsets of tensor {name!r} "
                                  f"start at {begin}: it {problem}, which ends at {expected})")
        expected = end
    if expected > data_length:
        raise CheckpointError(f"{where}: file is truncated (header says {expected} bytes of tensor "
                              f"data, file has {data_length})")
    if expected < data_length:
        raise CheckpointError(f"{where}: corrupted file ({data_length - expected} unexpected bytes "
                              f"after the {expected} bytes of tensor data)")
    return _Header(entries, metadata)


def _reject_known_foreign_formats(data: bytes, where: str) -> None:
    # Give formats people will actually try a useful message instead of "bad header length".
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise CheckpointError(f"{where}: file is a Python pickle (e.g. written by torch.save with the "
                              f"legacy format); corenn never unpickles files because unpickling can "
                              f"run code. In PyTorch, re-save it with "
                              f"safetensors.torch.save_file(state_dict, path)")
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        raise CheckpointError(f"{where}: file is a zip archive (PyTorch's torch.save format holds "
                              f"pickles inside a zip); corenn never unpickles files because "
                              f"unpickling can run code. In PyTorch, re-save it with "
                              f"safetensors.torch.save_file(state_dict, path)")


def _pairs_without_duplicates(pairs: list) -> dict:
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _parse_entry(name: str, info: Any, where: str) -> tuple[str, np.dtype, tuple, int, int]:
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{where}: corrupted header (tensor {name!r}: {problem})")

    if not isinstance(info, dict):
        raise bad("entry is not a JSON object")
    dtype_name = info.get("dtype")
    if dtype_name in _UNSUPPORTED_SAFETENSORS_DTYPES:
        supported = ", ".join(str(d) for d in _SAFETENSORS_TO_NUMPY.values())
        raise CheckpointError(f"{where}: tensor {name!r} has dtype {dtype_name}, which corenn does not "
                              f"support (supported: {supported}); convert it before saving, e.g. "
                              f"tensor.float() in PyTorch")
    if dtype_name not in _SAFETENSORS_TO_NUMPY:
        raise bad(f"unknown dtype {_short_repr(dtype_name)}")
    dtype = _SAFETENSORS_TO_NUMPY[dtype_name]
    shape = info.get("shape")
    if (not isinstance(shape, list) or len(shape) > _MAX_NDIM
            or not all(_is_json_int(d) and 0 <= d < 2**62 for d in shape)):
        raise bad(f"invalid shape {_short_repr(shape)}")
    offsets = info.get("data_offsets")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_json_int(o) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise bad(f"invalid data_offsets {_short_repr(offsets)}")
    begin, end = offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise bad(f"shape {shape} of {dtype_name} needs {nbytes} bytes but data_offsets span {end - begin}")
    return name, dtype, tuple(shape), begin, end


def _is_json_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _decode_tensors(data: bytes, header: _Header, where: str) -> dict[str, np.ndarray]:
    """The file's arrays by name, in file order, each writable and owning its memory."""
    try:
        loaded = safetensors.numpy.load(data)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - pyo3 panics derive from BaseException
        raise CheckpointError(f"{where}: the safetensors library rejected the file: "
                              f"{type(exc).__name__}: {exc}") from None
    arrays = {}
    for name, dtype, shape, _, _ in header.entries:
        array = loaded.pop(name, None)
        if array is None or array.dtype != dtype or array.shape != shape:
            raise CheckpointError(f"{where}: the safetensors library read tensor {name!r} differently "
                                  f"from its header")
        if not array.flags.writeable:
            array = array.copy()
        arrays[name] = array
    if loaded:
        raise CheckpointError(f"{where}: the safetensors library read tensors missing from the header: "
                              f"{sorted(loaded)[:5]}")
    return arrays


def _load_structure(metadata: dict[str, str], arrays: dict[str, np.ndarray], device, where: str) -> Any:
    version = metadata.get(_FORMAT_KEY)
    if version != str(FORMAT_VERSION):
        if version is not None and version.isdigit() and int(version) > FORMAT_VERSION:
            raise CheckpointError(f"{where}: written by a newer corenn (checkpoint format {version}; this "
                                  f"corenn reads format {FORMAT_VERSION}); upgrade corenn")
        raise CheckpointError(f"{where}: corrupted metadata (corenn.format is {_short_repr(version)}, "
                              f"expected '{FORMAT_VERSION}')")
    structure_json = metadata.get(_STRUCTURE_KEY)
    checksum = metadata.get(_CHECKSUM_KEY)
    if structure_json is None or checksum is None:
        missing = _STRUCTURE_KEY if structure_json is None else _CHECKSUM_KEY
        raise CheckpointError(f"{where}: corrupted metadata ({missing} is missing)")
    actual = _checksum(structure_json, arrays)
    if checksum != actual:
        raise CheckpointError(f"{where}: file is corrupted (checksum mismatch: metadata says "
                              f"{_short_repr(checksum)}, contents give {actual!r})")
    try:
        structure = json.loads(structure_json, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{where}: corrupted structure (not valid JSON: {exc})") from None
    decoder = _StructureDecoder(arrays, device, where)
    try:
        result = decoder.decode(structure, ())
    except RecursionError:
        raise CheckpointError(f"{where}: corrupted structure (nested too deeply)") from None
    unused = [name for name in arrays if name not in decoder.used_names]
    if unused:
        raise CheckpointError(f"{where}: corrupted structure (tensors {unused[:5]} are in the file but "
                              f"not in its structure)")
    return result


class _Materializer:
    """Makes Tensors over loaded arrays; tensors made from one array share its memory."""

    def __init__(self, arrays: dict[str, np.ndarray], device):
        import corenn

        self._from_numpy = corenn.from_numpy
        self._arrays = arrays
        self._device = device
        self._moved: dict[str, Any] = {}

    def tensor(self, name: str):
        if self._device is None:
            return self._from_numpy(self._arrays[name])
        # Move each array once; further tensors view the moved copy so they stay tied.
        moved = self._moved.get(name)
        if moved is None:
            moved = self._moved[name] = self._from_numpy(self._arrays[name]).to(self._device)
            return moved
        return moved.detach()


class _StructureDecoder:
    """Rebuilds the saved object from the structure JSON, accepting only format-1 nodes."""

    def __init__(self, arrays: dict[str, np.ndarray], device, where: str):
        self._arrays = arrays
        self._where = where
        self._materializer = _Materializer(arrays, device)
        self._objects: dict[int, tuple[str, Any]] = {}  # object id -> (name, Tensor)
        self.used_names: set[str] = set()

    def _bad(self, keys: tuple, problem: str) -> CheckpointError:
        return CheckpointError(f"{self._where}: corrupted structure at {_format_path(keys)}: {problem}")

    def decode(self, node: Any, keys: tuple) -> Any:
        if node is None or isinstance(node, (bool, str)) or _is_json_int(node):
            return node
        if not isinstance(node, dict):
            raise self._bad(keys, f"unexpected value {_short_repr(node)}")
        if node.keys() == {"tensor", "id"}:
            return self._tensor(node["tensor"], node["id"], keys)
        if len(node) != 1:
            raise self._bad(keys, f"unexpected object {_short_repr(node)}")
        ((tag, payload),) = node.items()
        if tag == "float":
            if isinstance(payload, str):
                try:
                    # float() only parses numbers ('inf', 'nan', '1e-3'); it evaluates nothing.
                    return float(payload)
                except ValueError:
                    pass
            raise self._bad(keys, f"invalid float {_short_repr(payload)}")
        if tag in ("list", "tuple") and isinstance(payload, list):
            items = [self.decode(item, keys + (i,)) for i, item in enumerate(payload)]
            return items if tag == "list" else tuple(items)
        if tag in ("dict", "odict") and isinstance(payload, list):
            result = {} if tag == "dict" else collections.OrderedDict()
            for pair in payload:
                if (not isinstance(pair, list) or len(pair) != 2
                        or not (isinstance(pair[0], str) or _is_json_int(pair[0]))):
                    raise self._bad(keys, f"invalid dict item {_short_repr(pair)}")
                key, value = pair
                if key in result:
                    raise self._bad(keys, f"duplicate key {key!r}")
                result[key] = self.decode(value, keys + (key,))
            return result
        raise self._bad(keys, f"unexpected object {_short_repr(node)}")

    def _tensor(self, name: Any, object_id: Any, keys: tuple):
        if not isinstance(name, str) or not _is_json_int(object_id):
            raise self._bad(keys, f"invalid tensor reference {_short_repr({'tensor': name, 'id': object_id})}")
        known = self._objects.get(object_id)
        if known is not None:
            if known[0] != name:
                raise self._bad(keys, f"tensor object {object_id} refers to both {known[0]!r} and {name!r}")
            return known[1]
        if name not in self._arrays:
            raise self._bad(keys, f"refers to tensor {name!r}, which the file does not contain")
        tensor = self._materializer.tensor(name)
        self._objects[object_id] = (name, tensor)
        self.used_names.add(name)
        return tensor


# --------------------------------------------------------------------------- helpers


def _checksum(structure_json: str, arrays: dict[str, np.ndarray]) -> str:
    """CRC-32 over the structure and each tensor's name, dtype, shape and bytes."""
    crc = zlib.crc32(b"corenn checkpoint format 1\0")
    crc = zlib.crc32(structure_json.encode("utf-8", "surrogatepass"), crc)
    for name in sorted(arrays):
        array = arrays[name]
        description = json.dumps([name, _NUMPY_TO_SAFETENSORS[array.dtype], list(array.shape)])
        crc = zlib.crc32(description.encode("utf-8", "surrogatepass"), crc)
        crc = zlib.crc32(array, crc)  # C-contiguous: saved arrays are made so, loaded ones are
    return f"crc32:{crc:08x}"


def _format_path(keys: tuple) -> str:
    """``('state', 3, 'foo')`` -> ``obj['state'][3]['foo']``."""
    return "obj" + "".join(f"[{key!r}]" for key in keys)


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__qualname__} object>"
    return text if len(text) <= limit else text[:limit - 3] + "..."
