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
  same object;
* a numpy array -> ``{"ndarray": name}``: its data is the safetensors entry ``name``, and
  ``load`` returns a numpy array (one array object per entry).

``corenn.checksum`` is a CRC-32 over the structure and every tensor's name, dtype, shape
and bytes; it turns accidental corruption anywhere in the file (a flipped bit in a weight,
an edited shape) into a :class:`CheckpointError` instead of silently wrong numbers. It is
not a signature: someone who can write the file can write a valid one.
"""
from __future__ import annotations

import codecs
import collections
import contextlib
import errno
import json
import math
import os
import re
import secrets
import stat
import zlib
from typing import Any

import numpy as np
import safetensors.numpy

__all__ = ["save", "load", "CheckpointError", "FORMAT_VERSION", "MAX_DEPTH", "add_safe_globals", "safe_globals",
           "get_safe_globals", "clear_safe_globals"]

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
# Containers nested deeper than this are refused by save and by load. A state dict needs a
# handful of levels; the bound keeps both well inside Python's recursion limit (the json
# module recurses too), so a hostile depth is a clear error, never a RecursionError.
MAX_DEPTH = 100
# Ints that fit 64 bits are stored as JSON numbers; larger ones as hex strings, which convert
# in linear time and are not subject to Python's limit on int <-> decimal str conversions.
_PLAIN_INT_BITS = 64

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

# safetensors names of the ml_dtypes floats; their numpy dtypes join the tables above on first use
# (importing ml_dtypes is slow, and most checkpoints hold none of them).
_LOW_PRECISION_SAFETENSORS = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _add_low_precision_dtypes() -> None:
    if "BF16" in _SAFETENSORS_TO_NUMPY:
        return
    from corenn import _dtype
    for st_name, corenn_name in _LOW_PRECISION_SAFETENSORS.items():
        numpy_dtype = _dtype.low_precision_dtype(corenn_name).numpy
        _SAFETENSORS_TO_NUMPY[st_name] = numpy_dtype
        _NUMPY_TO_SAFETENSORS[numpy_dtype] = st_name
        _UNSUPPORTED_SAFETENSORS_DTYPES.discard(st_name)


def _save_safetensors(arrays: dict[str, np.ndarray], metadata: dict) -> bytes:
    """``safetensors.numpy.save``, which knows no ml_dtypes floats: those go as same-size unsigned
    integers, and their header entries are then given their real dtype names (BF16, F8_E4M3, ...)."""
    renamed = {}
    plain = {}
    for name, array in arrays.items():
        if array.dtype.kind == "V":
            renamed[name] = _NUMPY_TO_SAFETENSORS[array.dtype]
            plain[name] = array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)
        else:
            plain[name] = array
    payload = safetensors.numpy.save(plain, metadata=metadata)
    if not renamed:
        return payload
    header_length = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + header_length])
    for name, dtype_name in renamed.items():
        header[name]["dtype"] = dtype_name
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes with spaces
    return len(text).to_bytes(8, "little") + text + payload[8 + header_length:]


_SUPPORTED_VALUES = ("tensors, numpy arrays, dict / OrderedDict (str or int keys), list, tuple, int, float, "
                     "str, bool and None")


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
    ints (of any size), floats, strings, bools and ``None`` -- module and optimizer state
    dicts are of this kind. Parameters are stored as plain tensors; ``load`` returns them with
    ``requires_grad=False``. numpy integer and floating scalars are stored as Python
    ``int`` / ``float``. Anything else raises ``TypeError`` naming ``f`` and where the value
    sits in ``obj`` (e.g. ``obj['state'][3]['foo']``) before the file is touched; so do a
    reference cycle and containers nested more than :data:`MAX_DEPTH` deep (``ValueError``).

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
    path = None
    if hasattr(f, "write"):
        target = str(getattr(f, "name", None) or f"<{type(f).__name__}>")
    else:
        try:
            path = target = os.fsdecode(os.fspath(f))
        except TypeError:
            raise TypeError(f"corenn.save: f must be a path (str or os.PathLike) or a writable binary "
                            f"file object, got {type(f).__name__}") from None
    payload = _serialize(obj, target)
    if path is None:
        f.write(payload)
        if hasattr(f, "flush"):
            f.flush()
        return
    _atomic_write(path, payload)


def _serialize(obj: Any, target: str = "<bytes>") -> bytes:
    """The complete checkpoint file for ``obj`` as bytes; ``target`` names the file in errors."""
    encoder = _Encoder(target)
    structure = encoder.encode(obj, ())
    structure_json = json.dumps(structure, separators=(",", ":"), allow_nan=False)
    metadata = {
        _FORMAT_KEY: str(FORMAT_VERSION),
        _STRUCTURE_KEY: structure_json,
        _CHECKSUM_KEY: _checksum(structure_json, encoder.arrays),
    }
    payload = _save_safetensors(encoder.arrays, metadata)
    header_length = int.from_bytes(payload[:8], "little")
    if header_length > _MAX_HEADER_BYTES:
        # Written anyway, the file could not be loaded again, by corenn or by safetensors.
        raise ValueError(f"corenn.save to {target}: the checkpoint's header would be {header_length:,} bytes, "
                         f"more than the {_MAX_HEADER_BYTES:,} that safetensors readers accept; it holds the "
                         f"tensor names and every value that is not a tensor (long strings or keys, long "
                         f"lists of numbers): store bulky data as tensors")
    return payload


class _Encoder:
    """Turns a nested object into a JSON-able structure plus a dict of named arrays."""

    def __init__(self, target: str = "<bytes>"):
        import corenn

        self._target = target  # the file, for error messages
        self._tensor_type = corenn.Tensor
        self.arrays: dict[str, np.ndarray] = {}  # safetensors name -> C-contiguous host array
        self._by_object: dict[int, tuple[str, int]] = {}  # id(tensor) -> (name, object id)
        self._by_memory: dict[tuple, str] = {}  # memory key -> name
        self._containers_on_path: set[int] = set()  # ids of enclosing containers, for cycles
        self._keep_alive: list = []

    def encode(self, value: Any, keys: tuple) -> Any:
        if value is None or isinstance(value, (bool, np.bool_)):
            return None if value is None else bool(value)
        if isinstance(value, (int, np.integer)):
            return _encode_int(int(value))
        if isinstance(value, (float, np.floating)):
            return {"float": repr(float(value))}
        if isinstance(value, str):
            return str(value)
        if isinstance(value, self._tensor_type):
            return self._encode_tensor(value, keys)
        if type(value) is np.ndarray:
            return self._encode_ndarray(value, keys)
        kind = _CONTAINER_TAGS.get(type(value))
        if kind is None:
            raise TypeError(f"corenn.save to {self._target}: cannot store {_short_repr(value)} of type "
                            f"{type(value).__qualname__!r} at {_format_path(keys)}; "
                            f"supported are {_SUPPORTED_VALUES}")
        if id(value) in self._containers_on_path:
            raise ValueError(f"corenn.save to {self._target}: {_format_path(keys)} contains itself "
                             f"(a reference cycle)")
        if len(self._containers_on_path) >= MAX_DEPTH:
            raise ValueError(f"corenn.save to {self._target}: containers are nested more than {MAX_DEPTH} deep "
                             f"at {_format_path(keys)}; checkpoints hold at most {MAX_DEPTH} levels "
                             f"(corenn.serialization.MAX_DEPTH): flatten the object, or store deep data "
                             f"as tensors")
        self._containers_on_path.add(id(value))
        try:
            if kind in ("dict", "odict"):
                items = []
                for key, item in value.items():
                    key = _check_key(key, keys, self._target)
                    items.append([_encode_int(key) if isinstance(key, int) else key,
                                  self.encode(item, keys + (key,))])
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
            if array.dtype.kind == "V":
                _add_low_precision_dtypes()
            if array.dtype not in _NUMPY_TO_SAFETENSORS:
                raise TypeError(f"corenn.save to {self._target}: cannot store a tensor of dtype {tensor.dtype} "
                                f"at {_format_path(keys)}")
            name = self._unique_name(keys)
            self.arrays[name] = array
            if memory_key is not None:
                self._by_memory[memory_key] = name
        self._by_object[id(tensor)] = (name, object_id)
        return {"tensor": name, "id": object_id}

    def _encode_ndarray(self, array: np.ndarray, keys: tuple) -> dict:
        # The same array object twice is stored once and comes back as one object.
        known = self._by_object.get(id(array))
        if known is not None:
            return {"ndarray": known[0]}
        if array.dtype not in _NUMPY_TO_SAFETENSORS:
            raise TypeError(f"corenn.save to {self._target}: cannot store a numpy array of dtype {array.dtype} "
                            f"at {_format_path(keys)}; supported dtypes: "
                            f"{', '.join(str(d) for d in _NUMPY_TO_SAFETENSORS)}")
        name = self._unique_name(keys)
        self.arrays[name] = np.ascontiguousarray(array)
        self._by_object[id(array)] = (name, None)
        self._keep_alive.append(array)  # ids stay unique while encoding
        return {"ndarray": name}

    def _unique_name(self, keys: tuple) -> str:
        # State-dict keys joined with '.' (what PyTorch's safetensors files use); a collision
        # such as {'a.b': x, 'a': {'b': y}} gets a '~N' suffix -- the structure is
        # authoritative, names are only for other readers.
        base = ".".join(_name_part(k) for k in keys) or "tensor"
        # safetensors names are UTF-8; a key with lone surrogates gets an escaped name.
        base = base.encode("utf-8", "backslashreplace").decode("utf-8")
        name, n = base, 0
        while name in self.arrays or name == _METADATA_KEY:
            n += 1
            name = f"{base}~{n}"
        return name


_CONTAINER_TAGS = {dict: "dict", collections.OrderedDict: "odict", list: "list", tuple: "tuple"}


def _check_key(key: Any, keys: tuple, target: str) -> str | int:
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    raise TypeError(f"corenn.save to {target}: cannot store dict key {_short_repr(key)} of type "
                    f"{type(key).__qualname__!r} at {_format_path(keys)}: keys must be str or int")


def _encode_int(value: int) -> int | dict:
    if -(1 << (_PLAIN_INT_BITS - 1)) <= value < (1 << _PLAIN_INT_BITS):
        return value
    return {"int": hex(value)}  # '0x1f' / '-0x1f'


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
    dtypes corenn lacks (``uint32``, ``complex64``, ...) raise :class:`CheckpointError`;
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

    def __init__(self, entries: list[tuple[str, np.dtype, tuple, int, int]], metadata: dict[str, str],
                 data_start: int):
        self.entries = entries  # (name, numpy dtype, shape, begin, end), offsets into the data
        self.metadata = metadata
        self.data_start = data_start  # where the tensor data begins in the file


def _parse_header(data: bytes, where: str) -> _Header:
    """Check everything the safetensors format promises, reading the header once.

    The header is read token by token against the format's grammar (see :class:`_JsonReader`),
    so a hostile header -- megabytes of ``[[],[],...]``, say -- fails at its first token out of
    place, having built nothing; memory grows only with well-formed tensor entries.
    """
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
    if data[8:9] != b"{":
        raise CheckpointError(f"{where}: not a safetensors file (header does not start with '{{')")

    def corrupted(problem: str) -> CheckpointError:
        return CheckpointError(f"{where}: corrupted header ({problem})")

    reader = _JsonReader(data, 8, 8 + header_length, corrupted)
    entries, names, metadata = [], set(), {}
    for _ in reader.members():
        name = reader.string()
        if name in names:
            raise corrupted(f"not valid JSON: duplicate key {_short_repr(name)}")
        names.add(name)
        reader.colon()
        if name == _METADATA_KEY:
            metadata = _read_metadata(reader, corrupted)
        else:
            entries.append(_parse_entry(name, _read_entry(reader, name, where), where))
    reader.finish()

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
    return _Header(entries, metadata, 8 + header_length)


def _read_metadata(reader: _JsonReader, corrupted) -> dict[str, str | bytearray]:
    """``__metadata__``: null, or an object of strings. Only corenn's own values are decoded:
    others (e.g. ``"format": "pt"``) are never used, whatever their size."""
    problem = "__metadata__ must map strings to strings"
    if reader.literal_null():
        return {}
    if reader.peek() != _OPEN_BRACE:
        raise corrupted(problem)
    metadata = {}
    for _ in reader.members():
        key = reader.string()
        if key in metadata:
            raise corrupted(f"not valid JSON: duplicate key {_short_repr(key)}")
        reader.colon()
        if reader.peek() != _QUOTE:
            raise corrupted(problem)
        if key == _STRUCTURE_KEY:
            metadata[key] = reader.string_bytes()  # UTF-8, as the checksum and the structure reader take it
        else:
            value = reader.string(None if key.startswith("corenn.") else 0)
            metadata[key] = value if value is not None else ""
    return metadata


def _read_entry(reader: _JsonReader, name: str, where: str) -> dict:
    """A tensor entry as a dict of scalars and short lists of scalars; anything bigger fails here."""
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{where}: corrupted header (tensor {_short_repr(name)}: {problem})")

    if reader.peek() != _OPEN_BRACE:
        raise bad("entry is not a JSON object")
    match = _COMPACT_ENTRY.match(reader.buf, reader.pos, reader.end)
    if match is not None:  # the layout safetensors writes, in one step
        dtype, shape, begin, end = match.groups()
        reader.pos = match.end()
        return {"dtype": dtype.decode("ascii"), "shape": [int(d) for d in shape.split(b",")] if shape else [],
                "data_offsets": [int(begin), int(end)]}
    info = {}
    for _ in reader.members():
        key = reader.string()
        if key in info:
            raise bad(f"duplicate key {_short_repr(key)}")
        reader.colon()
        c = reader.peek()
        if c == _OPEN_BRACKET:
            # shape and data_offsets: at most _MAX_NDIM scalars, checked by _parse_entry.
            items = []
            for _ in reader.elements():
                if len(items) == _MAX_NDIM or reader.peek() in (_OPEN_BRACKET, _OPEN_BRACE):
                    raise bad(f"invalid {key[:20]} (more than {_MAX_NDIM} numbers, or nested)")
                items.append(_entry_scalar(reader))
            info[key] = items
        elif c == _OPEN_BRACE:
            raise bad(f"unexpected object for {_short_repr(key, 20)}")
        else:
            info[key] = _entry_scalar(reader)
    return info


def _entry_scalar(reader: _JsonReader) -> Any:
    negative = reader.peek() == ord("-")
    value = reader.scalar(_SHORT_STRING)
    if negative and value == 0 and _is_json_int(value):
        return -0.0  # '-0' is no valid size or offset (JSON reads it as 0): keep it visibly invalid
    return value


# --------------------------------------------------------------------------- bounded JSON reading

_WHITESPACE = re.compile(rb"[ \t\n\r]*")
_WHITESPACE_BYTES = frozenset(b" \t\n\r")
# Part of a JSON string: no raw control character, no unescaped quote, at most 4096 escapes
# (each checked where the string is decoded).
_STRING_PART = re.compile(rb'[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*){0,4096}', re.DOTALL)
_SIMPLE_ESCAPES = {ord(k): ord(v) for k, v in zip('"\\/bfnrt', '"\\/\b\f\n\r\t')}
_UNICODE_ESCAPE = re.compile(rb"\\u([0-9a-fA-F]{4})(?:\\u([dD][c-fC-F][0-9a-fA-F]{2}))?")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_HEX_INT = re.compile(r"-?0x[0-9a-f]+")
_BAD_ESCAPE = re.compile(rb'\\(?!["\\/bfnrt]|u[0-9a-fA-F]{4})')
_NATURAL = rb"(?:0|[1-9][0-9]{0,18})"
_COMPACT_ENTRY = re.compile(rb'\{"dtype":"([A-Z0-9_]{1,16})","shape":\[(%s(?:,%s){0,%d})?\],"data_offsets":\[(%s),(%s)\]\}'
                            % (_NATURAL, _NATURAL, _MAX_NDIM - 1, _NATURAL, _NATURAL))
_MAX_NUMBER_CHARS = 4400  # Python's default limit on decimal int conversion is 4300 digits
_SHORT_STRING = 256  # bytes; longer strings in a tensor entry are not decoded (no dtype name is that long)
_QUOTE, _COLON, _COMMA, _BACKSLASH = ord('"'), ord(":"), ord(","), ord("\\")
_END = object()  # what next(reader.members(), _END) gives at the closing brace
_OPEN_BRACE, _CLOSE_BRACE, _OPEN_BRACKET, _CLOSE_BRACKET = ord("{"), ord("}"), ord("["), ord("]")


class _JsonReader:
    """Reads the JSON text ``buf[pos:end]`` one token at a time, building only what the caller
    asks for.

    ``json.loads`` builds the whole document before anyone can look at it: a header of
    ``[[],[],...]`` becomes millions of lists, tens of bytes of memory per byte of input. Here
    the caller says what it expects next (a string, a scalar, an object's members), so input
    that does not fit the format fails at its first token out of place. ``fail(problem)``
    makes the exception to raise.
    """

    def __init__(self, buf: bytes, pos: int, end: int, fail, errors: str = "strict"):
        self.buf, self.pos, self.end, self.fail = buf, pos, end, fail
        self.errors = errors  # how string bytes decode: "surrogatepass" for text we encoded so

    def peek(self) -> int:
        """The next non-whitespace byte, or -1 at the end."""
        if self.pos < self.end and self.buf[self.pos] not in _WHITESPACE_BYTES:
            return self.buf[self.pos]  # the common case, without a regex call
        self.pos = _WHITESPACE.match(self.buf, self.pos, self.end).end()
        return self.buf[self.pos] if self.pos < self.end else -1

    def excerpt(self) -> str:
        if self.pos >= self.end:
            return "the end of the text"
        return f"{_short_repr(bytes(self.buf[self.pos:min(self.pos + 30, self.end)]))} at byte {self.pos}"

    def expect(self, byte: int) -> None:
        if self.peek() != byte:
            raise self.fail(f"not valid JSON: expected {chr(byte)!r}, found {self.excerpt()}")
        self.pos += 1

    def colon(self) -> None:
        self.expect(_COLON)

    def _sequence(self, open_: int, close: int):
        self.expect(open_)
        if self.peek() == close:
            self.pos += 1
            return
        while True:
            yield
            c = self.peek()
            if c == close:
                self.pos += 1
                return
            if c != _COMMA:
                raise self.fail(f"not valid JSON: expected ',' or {chr(close)!r}, found {self.excerpt()}")
            self.pos += 1

    def members(self):
        """Iterate over an object: at each step the caller reads a key, ``colon()`` and a value."""
        return self._sequence(_OPEN_BRACE, _CLOSE_BRACE)

    def elements(self):
        """Iterate over an array: at each step the caller reads one value."""
        return self._sequence(_OPEN_BRACKET, _CLOSE_BRACKET)

    def _string_span(self) -> int:
        """Move past the next string; returns where it starts (its opening quote).

        A few thousand escapes per regex match: one match for the whole string would keep a
        backtracking point per escape, memory that grows with the string.
        """
        if self.peek() != _QUOTE:
            raise self.fail(f"not valid JSON: expected a string, found {self.excerpt()}")
        buf, end = self.buf, self.end
        start = pos = self.pos
        pos += 1
        while True:
            after = _STRING_PART.match(buf, pos, end).end()
            c = buf[after] if after < end else -1
            if c == _QUOTE:
                self.pos = after + 1
                return start
            if c == _BACKSLASH and after > pos:  # the part ended at its escape count: go on
                pos = after
                continue
            raise self.fail(f"not valid JSON: unterminated string, or a control character in it, at byte {start}")

    def string(self, limit: int | None = None) -> str | None:
        """The next string. With ``limit``, a string longer than ``limit`` bytes is checked but
        not decoded, and comes back as ``None``: what is not needed is not built."""
        start = self._string_span()
        if limit is not None and self.pos - start - 2 > limit:
            self._check_escapes(start, self.pos)
            self._check_utf8(start, self.pos)
            return None
        try:
            if self.buf.find(b"\\", start, self.pos) < 0:
                return str(memoryview(self.buf)[start + 1:self.pos - 1], "utf-8", self.errors)
            return json.decoder.scanstring(str(memoryview(self.buf)[start:self.pos], "utf-8", self.errors), 1)[0]
        except ValueError as exc:  # UnicodeDecodeError, or a bad escape
            raise self.fail(f"not valid JSON: bad string at byte {start}: {exc}") from None

    def string_bytes(self) -> bytearray:
        """The next string as UTF-8 bytes, unescaped straight into one buffer.

        For a string as large as the header itself (the structure): decoding it to a ``str``
        and unescaping that would hold three copies at once (file, text, result); this holds
        two (file, result).
        """
        start = self._string_span()
        stop = self.pos - 1
        self._check_utf8(start + 1, stop)
        out = bytearray(stop - start)  # unescaping never lengthens
        # Copies go through a memoryview: bytearray slice assignment copies its source first.
        out_view = memoryview(out)
        size = self._unescape_quotes(start + 1, stop, out_view)
        if size is None:
            size = self._unescape_any(start + 1, stop, out_view)
        out_view.release()
        del out[size:]
        return out

    def _unescape_quotes(self, pos: int, stop: int, out_view: memoryview) -> int | None:
        """Unescape ``buf[pos:stop]`` into ``out_view`` a chunk at a time at C speed, if its only
        escapes are ``\\"`` and ``\\\\`` -- all a JSON writer puts in corenn's ASCII structure.
        Returns the size, or None when there are other escapes."""
        buf, view, size = self.buf, memoryview(self.buf), 0
        while pos < stop:
            end = min(pos + (1 << 20), stop)
            trailing = 0
            while end - 1 - trailing >= pos and buf[end - 1 - trailing] == _BACKSLASH:
                trailing += 1
            end += trailing % 2  # a chunk ends between escapes, never inside one
            # Escapes pair up from the left, as bytes.replace scans; a raw NUL cannot be in a JSON string.
            chunk = bytes(view[pos:end]).replace(b"\\\\", b"\0").replace(b'\\"', b'"')
            if b"\\" in chunk:
                return None
            chunk = chunk.replace(b"\0", b"\\")
            out_view[size:size + len(chunk)] = chunk
            size, pos = size + len(chunk), end
        return size

    def _unescape_any(self, pos: int, stop: int, out_view: memoryview) -> int:
        """Unescape ``buf[pos:stop]`` into ``out_view``, one escape at a time; returns the size."""
        buf, view, size = self.buf, memoryview(self.buf), 0
        while True:
            escape = buf.find(b"\\", pos, stop)
            run_end = stop if escape < 0 else escape
            out_view[size:size + run_end - pos] = view[pos:run_end]
            size += run_end - pos
            if escape < 0:
                break
            simple = _SIMPLE_ESCAPES.get(buf[escape + 1])
            if simple is not None:
                out_view[size] = simple
                size, pos = size + 1, escape + 2
                continue
            match = _UNICODE_ESCAPE.match(buf, escape, stop)
            if match is None:
                raise self.fail(f"not valid JSON: bad escape at byte {escape}")
            code, low = int(match.group(1), 16), match.group(2)
            if 0xD800 <= code < 0xDC00 and low is not None:  # a surrogate pair
                code, pos = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00), match.end()
            else:
                pos = escape + 6
            encoded = chr(code).encode("utf-8", "surrogatepass")  # a lone surrogate stays one, as in json
            out_view[size:size + len(encoded)] = encoded
            size += len(encoded)
        return size

    def _check_escapes(self, start: int, end: int) -> None:
        bad = _BAD_ESCAPE.search(self.buf, start, end)
        if bad is not None:
            raise self.fail(f"not valid JSON: bad escape at byte {bad.start()}")

    def _check_utf8(self, start: int, end: int) -> None:
        """Checks ``buf[start:end]`` is UTF-8 a chunk at a time, building nothing of its size."""
        decoder = codecs.getincrementaldecoder("utf-8")(self.errors)
        view = memoryview(self.buf)
        try:
            for chunk in range(start, end, 1 << 20):
                decoder.decode(view[chunk:min(chunk + (1 << 20), end)], final=chunk + (1 << 20) >= end)
        except UnicodeDecodeError as exc:
            raise self.fail(f"not valid JSON: bad string at byte {start}: {exc}") from None

    def literal_null(self) -> bool:
        if self.peek() == ord("n") and self.buf.startswith(b"null", self.pos, self.end):
            self.pos += 4
            return True
        return False

    def scalar(self, limit: int | None = None) -> Any:
        """A string (see ``string`` for ``limit``), number, ``true``, ``false`` or ``null``;
        an array or object here fails."""
        c = self.peek()
        if c == _QUOTE:
            return self.string(limit)
        if c == ord("-") or ord("0") <= c <= ord("9"):
            match = _NUMBER.match(self.buf, self.pos, self.end)
            if match is None:
                raise self.fail(f"not valid JSON: bad number {self.excerpt()}")
            if match.end() - match.start() > _MAX_NUMBER_CHARS:
                # Decimal conversion takes time quadratic in the digits, whatever
                # sys.set_int_max_str_digits allows; no writer puts such numbers in a header.
                raise self.fail(f"a number of {match.end() - match.start()} characters at byte {match.start()}")
            token, self.pos = self.buf[match.start():match.end()], match.end()
            try:
                return float(token) if match.group(1) or match.group(2) else int(token)
            except ValueError:  # more digits than this Python converts (sys.set_int_max_str_digits)
                raise self.fail(f"a number of {len(token)} characters at byte {match.start()}") from None
        for literal, value in ((b"true", True), (b"false", False), (b"null", None)):
            if self.buf.startswith(literal, self.pos, self.end):
                self.pos += len(literal)
                return value
        raise self.fail(f"not valid JSON: expected a value, found {self.excerpt()}")

    def finish(self) -> None:
        """Only whitespace may follow the document."""
        if self.peek() != -1:
            raise self.fail(f"not valid JSON: extra data {self.excerpt()}")


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


def _parse_entry(name: str, info: Any, where: str) -> tuple[str, np.dtype, tuple, int, int]:
    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{where}: corrupted header (tensor {name!r}: {problem})")

    if not isinstance(info, dict):
        raise bad("entry is not a JSON object")
    dtype_name = info.get("dtype")
    if dtype_name in _LOW_PRECISION_SAFETENSORS:
        _add_low_precision_dtypes()
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
    """The file's arrays by name, in file order, each writable and owning its memory.

    Read straight from the offsets :func:`_parse_header` validated, so the header is parsed
    once (the safetensors library would parse it again).
    """
    arrays = {}
    for name, dtype, shape, begin, end in header.entries:
        count = math.prod(shape)
        if count:
            # safetensors stores little-endian; astype copies into native order and owned memory.
            stored = np.frombuffer(data, dtype.newbyteorder("<"), count, header.data_start + begin)
            arrays[name] = stored.reshape(shape).astype(dtype, copy=True)
        else:
            arrays[name] = np.empty(shape, dtype)
    return arrays


def _load_structure(metadata: dict[str, str | bytearray], arrays: dict[str, np.ndarray], device, where: str) -> Any:
    version = metadata.get(_FORMAT_KEY)
    if version != str(FORMAT_VERSION):
        if version is not None and version.isdigit() and int(version) > FORMAT_VERSION:
            raise CheckpointError(f"{where}: written by a newer corenn (checkpoint format {version}; this "
                                  f"corenn reads format {FORMAT_VERSION}); upgrade corenn")
        raise CheckpointError(f"{where}: corrupted metadata (corenn.format is {_short_repr(version)}, "
                              f"expected '{FORMAT_VERSION}')")
    structure_bytes = metadata.pop(_STRUCTURE_KEY, None)  # UTF-8 (see _read_metadata)
    checksum = metadata.get(_CHECKSUM_KEY)
    if structure_bytes is None or checksum is None:
        missing = _STRUCTURE_KEY if structure_bytes is None else _CHECKSUM_KEY
        raise CheckpointError(f"{where}: corrupted metadata ({missing} is missing)")
    actual = _checksum(structure_bytes, arrays)
    if checksum != actual:
        raise CheckpointError(f"{where}: file is corrupted (checksum mismatch: metadata says "
                              f"{_short_repr(checksum)}, contents give {actual!r})")
    decoder = _StructureDecoder(arrays, device, where)
    result = decoder.decode_document(structure_bytes)
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
    """Rebuilds the saved object from the structure JSON, accepting only format-1 nodes.

    It reads the JSON with :class:`_JsonReader` and builds the saved object directly, with no
    intermediate document: a node that is not format 1 fails at its first token, and nesting
    deeper than :data:`MAX_DEPTH` (which ``save`` never writes) fails before Python's
    recursion limit.
    """

    def __init__(self, arrays: dict[str, np.ndarray], device, where: str):
        self._arrays = arrays
        self._where = where
        self._materializer = _Materializer(arrays, device)
        self._objects: dict[int, tuple[str, Any]] = {}  # object id -> (name, Tensor)
        self._ndarrays: dict[str, np.ndarray] = {}  # entry name -> the numpy array loaded from it
        self.used_names: set[str] = set()

    def _bad(self, keys: tuple, problem: str) -> CheckpointError:
        return CheckpointError(f"{self._where}: corrupted structure at {_format_path(keys)}: {problem}")

    def decode_document(self, text: bytes | bytearray) -> Any:
        def syntax(problem: str) -> CheckpointError:
            return CheckpointError(f"{self._where}: corrupted structure ({problem})")

        reader = _JsonReader(text, 0, len(text), syntax, errors="surrogatepass")
        result = self.decode(reader, (), 0)
        reader.finish()
        return result

    def decode(self, reader: _JsonReader, keys: tuple, depth: int) -> Any:
        c = reader.peek()
        if c != _OPEN_BRACE:
            if c == _OPEN_BRACKET:
                raise self._bad(keys, f"unexpected value {reader.excerpt()}")
            value = reader.scalar()
            if isinstance(value, float):  # floats are stored as {"float": repr}, never bare
                raise self._bad(keys, f"unexpected value {value!r}")
            return value
        if depth >= MAX_DEPTH:
            raise self._bad(keys, f"nested more than {MAX_DEPTH} deep")
        start = reader.pos
        members = reader.members()
        if next(members, _END) is _END:
            raise self._bad(keys, "unexpected object {}")
        tag = reader.string()
        reader.colon()
        if tag in ("tensor", "id"):
            first = self._scalar(reader, keys)
            if next(members, _END) is _END:
                raise self._bad(keys, f"unexpected object with the single key {tag!r}")
            other = reader.string()
            reader.colon()
            second = self._scalar(reader, keys)
            if {tag, other} != {"tensor", "id"}:
                raise self._bad(keys, f"unexpected object with keys {tag!r} and {_short_repr(other)}")
            name, object_id = (first, second) if tag == "tensor" else (second, first)
            value = self._tensor(name, object_id, keys)
        elif tag in ("float", "int"):
            value = self._number(tag, self._scalar(reader, keys), keys)
        elif tag == "ndarray":
            value = self._ndarray(self._scalar(reader, keys), keys)
        elif tag in ("list", "tuple"):
            if reader.peek() != _OPEN_BRACKET:
                raise self._bad(keys, f"{tag} payload is not a list: {reader.excerpt()}")
            items = []
            for _ in reader.elements():
                items.append(self.decode(reader, keys + (len(items),), depth + 1))
            value = items if tag == "list" else tuple(items)
        elif tag in ("dict", "odict"):
            if reader.peek() != _OPEN_BRACKET:
                raise self._bad(keys, f"{tag} payload is not a list: {reader.excerpt()}")
            value = {} if tag == "dict" else collections.OrderedDict()
            for _ in reader.elements():
                if reader.peek() != _OPEN_BRACKET:
                    raise self._bad(keys, f"invalid dict item {reader.excerpt()}")
                pair = reader.elements()
                if next(pair, _END) is _END:
                    raise self._bad(keys, "invalid dict item []")
                key = self._key(reader, keys)
                if key in value:
                    raise self._bad(keys, f"duplicate key {_short_repr(key)}")
                if next(pair, _END) is _END:
                    raise self._bad(keys, f"invalid dict item: key {_short_repr(key)} without a value")
                value[key] = self.decode(reader, keys + (key,), depth + 1)
                if next(pair, _END) is not _END:
                    raise self._bad(keys, f"invalid dict item for key {_short_repr(key)}: more than two elements")
        else:
            raise self._bad(keys, f"unexpected object with key {_short_repr(tag)}")
        if next(members, _END) is not _END:
            reader.pos = start
            raise self._bad(keys, f"unexpected object with more than one key: {reader.excerpt()}")
        return value

    def _key(self, reader: _JsonReader, keys: tuple) -> str | int:
        c = reader.peek()
        if c == _OPEN_BRACE:  # an int too large for a JSON number: {"int": "0x..."}
            members = reader.members()
            tag = reader.string() if next(members, _END) is not _END and reader.peek() == _QUOTE else None
            if tag != "int":
                raise self._bad(keys, f"invalid dict key {reader.excerpt()}")
            reader.colon()
            key = self._number("int", self._scalar(reader, keys), keys)
            if next(members, _END) is not _END:
                raise self._bad(keys, "invalid dict key: an object with more than one key")
            return key
        if c in (_OPEN_BRACKET, -1):
            raise self._bad(keys, f"invalid dict key {reader.excerpt()}")
        key = reader.scalar()
        if not (isinstance(key, str) or _is_json_int(key)):
            raise self._bad(keys, f"invalid dict key {_short_repr(key)}")
        return key

    def _scalar(self, reader: _JsonReader, keys: tuple) -> Any:
        if reader.peek() in (_OPEN_BRACE, _OPEN_BRACKET):
            raise self._bad(keys, f"unexpected value {reader.excerpt()}")
        return reader.scalar()

    def _number(self, tag: str, payload: Any, keys: tuple) -> float | int:
        if isinstance(payload, str):
            if tag == "float":
                try:
                    # float() only parses numbers ('inf', 'nan', '1e-3'); it evaluates nothing.
                    return float(payload)
                except ValueError:
                    pass
            elif _HEX_INT.fullmatch(payload):
                return int(payload, 16)
        raise self._bad(keys, f"invalid {tag} {_short_repr(payload)}")

    def _ndarray(self, name: Any, keys: tuple) -> np.ndarray:
        if not isinstance(name, str):
            raise self._bad(keys, f"invalid array reference {_short_repr(name)}")
        known = self._ndarrays.get(name)
        if known is not None:
            return known
        if name not in self._arrays:
            raise self._bad(keys, f"refers to array {name!r}, which the file does not contain")
        array = self._arrays[name]
        if not array.flags.writeable:  # numpy arrays come back as ordinary, writable arrays
            array = array.copy()
        self._ndarrays[name] = array
        self.used_names.add(name)
        return array

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


def _checksum(structure_json: str | bytes | bytearray, arrays: dict[str, np.ndarray]) -> str:
    """CRC-32 over the structure (str, or its UTF-8 bytes) and each tensor's name, dtype, shape and bytes."""
    if isinstance(structure_json, str):
        structure_json = structure_json.encode("utf-8", "surrogatepass")
    crc = zlib.crc32(b"corenn checkpoint format 1\0")
    crc = zlib.crc32(structure_json, crc)
    for name in sorted(arrays):
        array = arrays[name]
        description = json.dumps([name, _NUMPY_TO_SAFETENSORS[array.dtype], list(array.shape)])
        crc = zlib.crc32(description.encode("utf-8", "surrogatepass"), crc)
        crc = zlib.crc32(array, crc)  # C-contiguous: saved arrays are made so, loaded ones are
    return f"crc32:{crc:08x}"


def _format_path(keys: tuple) -> str:
    """``('state', 3, 'foo')`` -> ``obj['state'][3]['foo']``; a deep path keeps its ends."""
    parts = [f"[{_short_repr(key, 40)}]" for key in (keys if len(keys) <= 12 else keys[:6] + keys[-5:])]
    if len(keys) > 12:
        parts.insert(6, f"...({len(keys) - 11} more levels)...")
    return "obj" + "".join(parts)


def _name_part(key: str | int) -> str:
    """A key as part of a tensor name; ints too long for decimal conversion are written in hex."""
    return key if isinstance(key, str) else str(key) if key.bit_length() <= _PLAIN_INT_BITS else hex(key)


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__qualname__} object>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


# --------------------------------------------------------------------------- safe globals

# PyTorch's ``weights_only`` unpickler refuses classes not on an allow-list; programs extend it with
# ``add_safe_globals`` before ``load``. corenn never unpickles (a checkpoint is JSON and raw bytes),
# so the list changes nothing: it is kept so that those programs run, and so they can read it back.
_safe_globals: list = []
_safe_globals_warned = False


def _warn_safe_globals_unused() -> None:
    global _safe_globals_warned
    if _safe_globals_warned:
        return
    _safe_globals_warned = True
    import warnings
    names = ", ".join(_global_name(g) for g in _safe_globals) or "none"
    warnings.warn(f"corenn.serialization safe globals ({names}) change nothing: corenn.load never unpickles, "
                  f"it reads JSON and raw tensor bytes, so no class or function from a checkpoint is ever "
                  f"imported or called", UserWarning, stacklevel=3)


def _global_name(g) -> str:
    if isinstance(g, tuple) and len(g) == 2:  # (object, "module.name") as PyTorch accepts
        return str(g[1])
    return f"{getattr(g, '__module__', '?')}.{getattr(g, '__qualname__', getattr(g, '__name__', repr(g)))}"


def add_safe_globals(safe_globals: list) -> None:
    """Add to the list of globals ``load`` would allow (``torch.serialization.add_safe_globals``).

    corenn's ``load`` never unpickles, so the list changes nothing; it exists so that ported programs
    run, and a warning on first use says so, naming the globals.

        >>> import collections
        >>> corenn.serialization.add_safe_globals([collections.OrderedDict])
    """
    if not isinstance(safe_globals, (list, tuple)):
        raise TypeError(f"add_safe_globals(): argument 'safe_globals' must be a list, not "
                        f"{type(safe_globals).__name__}")
    for g in safe_globals:
        if g not in _safe_globals:
            _safe_globals.append(g)
    _warn_safe_globals_unused()


def get_safe_globals() -> list:
    """The globals added with :func:`add_safe_globals` (a copy)."""
    return list(_safe_globals)


def clear_safe_globals() -> None:
    """Empty the list of safe globals."""
    _safe_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals: list):
    """Context manager adding ``safe_globals`` for the block (``torch.serialization.safe_globals``); see
    :func:`add_safe_globals` for why it changes nothing in corenn."""
    previous = list(_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _safe_globals[:] = previous
