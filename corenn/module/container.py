"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``.

Each registers what it holds as ordinary submodules / parameters (named ``"0"``,
``"1"``, ... or by key), so ``parameters()``, ``state_dict()`` and ``to()`` see them.

Example::

    >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> net(corenn.randn(4)).shape
    corenn.Size([1])
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from collections import abc as container_abcs
from itertools import chain, islice

from corenn.module.module import Module, _addindent, _typename
from corenn.module.parameter import Parameter
from corenn.tensor.tensor import Tensor

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _abs_index(index, size: int, kind: str) -> int:
    index = operator.index(index)
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of range for a {kind} of length {size}")
    return index % size if size else index


class Sequential(Module):
    """Modules run one after another, each one's output the next one's input.

    Built from modules (named ``"0"``, ``"1"``, ...) or from one ``OrderedDict`` of
    named modules. Supports indexing, slicing (a new ``Sequential``), ``len``,
    iteration, ``append``, ``insert``, ``extend``, ``pop``, ``+`` and ``*``.

    Example::

        >>> net = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        >>> net.append(nn.Linear(3, 1))[2]
        Linear(in_features=3, out_features=1, bias=True)
        >>> len(net[:2])
        2
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)

    def _key_at(self, index) -> str:
        size = len(self._modules)
        return next(islice(iter(self._modules), _abs_index(index, size, "Sequential"), None))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.__class__(OrderedDict(list(self._modules.items())[index]))
        return self._modules[self._key_at(index)]

    def __setitem__(self, index, module: Module) -> None:
        setattr(self, self._key_at(index), module)

    def __delitem__(self, index) -> None:
        if isinstance(index, slice):
            for key in list(self._modules)[index]:
                delattr(self, key)
        else:
            delattr(self, self._key_at(index))
        # Keep the numbering contiguous, as PyTorch does (named entries are renumbered too).
        self._modules = dict(zip((str(i) for i in range(len(self._modules))), self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        result = Sequential()
        for layer in chain(self, other):
            result.append(layer)
        return result

    def __iadd__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        for layer in list(other):
            self.append(layer)
        return self

    def __mul__(self, other: int) -> "Sequential":
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        result = Sequential()
        for _ in range(other):
            for layer in self:
                result.append(layer)
        return result

    __rmul__ = __mul__

    def __imul__(self, other: int) -> "Sequential":
        if not isinstance(other, int):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        layers = list(self)
        for _ in range(other - 1):
            for layer in layers:
                self.append(layer)
        return self

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def pop(self, key) -> Module:
        """Remove and return the module at index ``key``.

        Example::

            >>> nn.Sequential(nn.ReLU(), nn.Tanh()).pop(0)
            ReLU()
        """
        value = self[key]
        del self[key]
        return value

    def append(self, module: Module) -> "Sequential":
        """Add ``module`` at the end; returns ``self``.

        Example::

            >>> len(nn.Sequential().append(nn.ReLU()))
            1
        """
        self.add_module(str(len(self)), module)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        """Insert ``module`` before position ``index`` (negative counts from the end); returns ``self``.

        Example::

            >>> nn.Sequential(nn.ReLU()).insert(0, nn.Tanh())[0]
            Tanh()
        """
        if not isinstance(module, Module):
            raise TypeError(f"Sequential.insert: module should be of type nn.Module, got {_typename(module)}")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        values = list(self._modules.values())
        values.insert(index, module)
        self._modules = {}
        for i, value in enumerate(values):
            self.add_module(str(i), value)
        return self

    def extend(self, sequential) -> "Sequential":
        """Append every module of ``sequential`` (any iterable of modules); returns ``self``.

        Example::

            >>> len(nn.Sequential(nn.ReLU()).extend([nn.Tanh(), nn.ReLU()]))
            3
        """
        for layer in sequential:
            self.append(layer)
        return self

    def forward(self, input):
        """Feed ``input`` through each module in turn."""
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered as children ``"0"``, ``"1"``, ... (it has no ``forward``).

    Example::

        >>> layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        >>> x = corenn.randn(4)
        >>> for layer in layers:
        ...     x = layer(x)
        >>> len(layers), len(list(layers.parameters()))
        (3, 6)
    """

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self += modules

    def _abs_string_index(self, index) -> str:
        return str(_abs_index(index, len(self), "ModuleList"))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.__class__(list(self._modules.values())[index])
        return self._modules[self._abs_string_index(index)]

    def __setitem__(self, index, module: Module) -> None:
        setattr(self, self._abs_string_index(index), module)

    def __delitem__(self, index) -> None:
        if isinstance(index, slice):
            for k in range(len(self._modules))[index]:
                delattr(self, str(k))
        else:
            delattr(self, self._abs_string_index(index))
        self._modules = dict(zip((str(i) for i in range(len(self._modules))), self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other) -> "ModuleList":
        combined = ModuleList()
        for i, module in enumerate(chain(self, other)):
            combined.add_module(str(i), module)
        return combined

    def __repr__(self) -> str:
        # Runs of identical children print once, as "(0-2): 3 x Linear(...)" (PyTorch's form).
        reprs = [repr(module) for module in self]
        if not reprs:
            return self._get_name() + "()"
        blocks = []  # [start, end, text]
        for i, text in enumerate(reprs):
            if blocks and blocks[-1][2] == text:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, text])
        lines = []
        for start, end, text in blocks:
            line = f"({start}): {text}" if start == end else f"({start}-{end}): {end - start + 1} x {text}"
            lines.append(_addindent(line, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``.

        Example::

            >>> layers = nn.ModuleList([nn.ReLU()]); layers.insert(0, nn.Tanh()); layers[0]
            Tanh()
        """
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def append(self, module: Module) -> "ModuleList":
        """Add ``module`` at the end; returns ``self``.

        Example::

            >>> len(nn.ModuleList().append(nn.ReLU()))
            1
        """
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key) -> Module:
        """Remove and return the module at index ``key``.

        Example::

            >>> nn.ModuleList([nn.ReLU()]).pop(0)
            ReLU()
        """
        value = self[key]
        del self[key]
        return value

    def extend(self, modules) -> "ModuleList":
        """Append every module of the iterable ``modules``; returns ``self``.

        Example::

            >>> len(nn.ModuleList().extend([nn.ReLU(), nn.Tanh()]))
            2
        """
        if not isinstance(modules, container_abcs.Iterable):
            raise TypeError("ModuleList.extend should be called with an iterable, but got " + type(modules).__name__)
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self


class ModuleDict(Module):
    """A dict of modules, registered as children under their keys (it has no ``forward``).

    Order is insertion order (a plain dict keeps its order too).

    Example::

        >>> acts = nn.ModuleDict({"relu": nn.ReLU(), "lrelu": nn.LeakyReLU()})
        >>> list(acts.keys())
        ['relu', 'lrelu']
        >>> acts["relu"](corenn.tensor([-1., 1.]))
        tensor([0., 1.])
    """

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every module.

        Example::

            >>> d = nn.ModuleDict({"a": nn.ReLU()}); d.clear(); len(d)
            0
        """
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove and return the module under ``key``.

        Example::

            >>> nn.ModuleDict({"a": nn.ReLU()}).pop("a")
            ReLU()
        """
        value = self[key]
        del self[key]
        return value

    def keys(self):
        """The keys, in order.

        Example::

            >>> list(nn.ModuleDict({"a": nn.ReLU()}).keys())
            ['a']
        """
        return self._modules.keys()

    def items(self):
        """``(key, module)`` pairs, in order.

        Example::

            >>> list(nn.ModuleDict({"a": nn.ReLU()}).items())
            [('a', ReLU())]
        """
        return self._modules.items()

    def values(self):
        """The modules, in order.

        Example::

            >>> list(nn.ModuleDict({"a": nn.ReLU()}).values())
            [ReLU()]
        """
        return self._modules.values()

    def update(self, modules) -> None:
        """Add (or overwrite) entries from a mapping or an iterable of ``(key, module)`` pairs.

        Example::

            >>> d = nn.ModuleDict(); d.update([("a", nn.ReLU())]); list(d)
            ['a']
        """
        if not isinstance(modules, container_abcs.Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value pairs, but got "
                            + type(modules).__name__)
        if isinstance(modules, (OrderedDict, ModuleDict, container_abcs.Mapping)):
            for key, module in modules.items():
                self[key] = module
            return
        for j, pair in enumerate(modules):
            if not isinstance(pair, container_abcs.Iterable):
                raise TypeError(f"ModuleDict update sequence element #{j} should be Iterable; is "
                                + type(pair).__name__)
            if len(pair) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} has length {len(pair)}; 2 is required")
            self[pair[0]] = pair[1]


def _describe_entry(key, value, type_name) -> str:
    if isinstance(value, Tensor):
        size = "x".join(str(s) for s in value.size())
        device = f" ({value.device})" if value.device.type != "cpu" else ""
        kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
        return f"  ({key}): {kind} containing: [{type_name(value)} of size {size}{device}]"
    return f"  ({key}): Object of type: {type(value).__name__}"


class ParameterList(Module):
    """A list of parameters, registered as ``"0"``, ``"1"``, ... ; tensors put in it become Parameters.

    Example::

        >>> params = nn.ParameterList([nn.Parameter(corenn.randn(2)) for _ in range(3)])
        >>> [name for name, _ in params.named_parameters()]
        ['0', '1', '2']
    """

    def __init__(self, values=None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def _abs_string_index(self, index) -> str:
        return str(_abs_index(index, len(self), "ParameterList"))

    def __getitem__(self, index):
        if isinstance(index, slice):
            out = self.__class__()
            for i in range(*index.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, self._abs_string_index(index))

    def __setitem__(self, index, param) -> None:
        key = self._abs_string_index(index)
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, key, param)

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def __iadd__(self, parameters) -> "ParameterList":
        return self.extend(parameters)

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value) -> "ParameterList":
        """Add ``value`` at the end (a tensor becomes a Parameter); returns ``self``.

        Example::

            >>> len(nn.ParameterList().append(corenn.zeros(2)))
            1
        """
        index = len(self)
        self._size += 1
        self[index] = value
        return self

    def extend(self, values) -> "ParameterList":
        """Append every entry of the iterable ``values``; returns ``self``.

        Example::

            >>> len(nn.ParameterList().extend([corenn.zeros(1), corenn.ones(1)]))
            2
        """
        if not isinstance(values, container_abcs.Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got " + type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(_describe_entry(i, value, lambda t: t.dtype) for i, value in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """A dict of parameters registered under their keys; tensors put in it become Parameters.

    Like PyTorch, a plain ``dict`` given to the constructor or ``update`` is added in
    sorted key order; an ``OrderedDict``, a ``ParameterDict`` or a sequence of pairs
    keeps its order.

    Example::

        >>> pd = nn.ParameterDict({"foo": nn.Parameter(corenn.randn(3)), "bar": nn.Parameter(corenn.randn(4))})
        >>> list(pd.keys())
        ['bar', 'foo']
    """

    def __init__(self, parameters=None) -> None:
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _key_to_attr(key) -> str:
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is not a string "
                            f"(type is '{type(key).__name__}').")
        return key

    def __getitem__(self, key: str):
        attr = self._key_to_attr(key)
        if attr not in self._keys:
            raise KeyError(key)
        return getattr(self, attr)

    def __setitem__(self, key: str, value) -> None:
        attr = self._key_to_attr(key)
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, attr, value)
        self._keys[key] = None

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, self._key_to_attr(key))

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def copy(self) -> "ParameterDict":
        """A new ParameterDict holding the same parameters, in the same order.

        Example::

            >>> list(nn.ParameterDict({"a": corenn.zeros(1)}).copy())
            ['a']
        """
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key: str, default=None):
        """``self[key]``, first setting it to ``default`` if absent.

        Example::

            >>> nn.ParameterDict().setdefault("a", corenn.zeros(1)).shape
            corenn.Size([1])
        """
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self) -> None:
        """Remove every entry.

        Example::

            >>> pd = nn.ParameterDict({"a": corenn.zeros(1)}); pd.clear(); len(pd)
            0
        """
        for key in list(self._keys):
            del self[key]

    def pop(self, key: str):
        """Remove and return the entry under ``key``.

        Example::

            >>> nn.ParameterDict({"a": corenn.zeros(1)}).pop("a").shape
            corenn.Size([1])
        """
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        """Remove and return the last ``(key, value)`` pair.

        Example::

            >>> nn.ParameterDict({"a": corenn.zeros(1)}).popitem()[0]
            'a'
        """
        if not self._keys:
            raise KeyError("popitem(): ParameterDict is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def get(self, key: str, default=None):
        """``self[key]`` if present, else ``default``.

        Example::

            >>> nn.ParameterDict().get("missing") is None
            True
        """
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None) -> "ParameterDict":
        """A new ParameterDict with ``keys``, each set to ``default``.

        Example::

            >>> list(nn.ParameterDict().fromkeys(["a", "b"], corenn.zeros(1)))
            ['a', 'b']
        """
        return ParameterDict((k, default) for k in keys)

    def keys(self):
        """The keys, in order.

        Example::

            >>> list(nn.ParameterDict([("b", corenn.zeros(1)), ("a", corenn.zeros(1))]).keys())
            ['b', 'a']
        """
        return self._keys.keys()

    def items(self):
        """``(key, value)`` pairs, in order.

        Example::

            >>> [k for k, _ in nn.ParameterDict({"a": corenn.zeros(1)}).items()]
            ['a']
        """
        return ((k, self[k]) for k in self._keys)

    def values(self):
        """The values, in order.

        Example::

            >>> len(list(nn.ParameterDict({"a": corenn.zeros(1)}).values()))
            1
        """
        return (self[k] for k in self._keys)

    def update(self, parameters) -> None:
        """Add (or overwrite) entries; a plain dict is added in sorted key order (PyTorch's rule).

        Example::

            >>> pd = nn.ParameterDict(); pd.update({"b": corenn.zeros(1), "a": corenn.zeros(1)}); list(pd)
            ['a', 'b']
        """
        if not isinstance(parameters, container_abcs.Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of key/value pairs, but got "
                            + type(parameters).__name__)
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            for key, parameter in parameters.items():
                self[key] = parameter
        elif isinstance(parameters, container_abcs.Mapping):
            for key, parameter in sorted(parameters.items()):
                self[key] = parameter
        else:
            for j, pair in enumerate(parameters):
                if not isinstance(pair, container_abcs.Iterable):
                    raise TypeError(f"ParameterDict update sequence element #{j} should be Iterable; is "
                                    + type(pair).__name__)
                if len(pair) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} has length {len(pair)}; "
                                     "2 is required")
                self[pair[0]] = pair[1]

    def extra_repr(self) -> str:
        return "\n".join(_describe_entry(k, value, _typename) for k, value in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other: "ParameterDict") -> "ParameterDict":
        result = self.copy()
        result.update(other)
        return result

    def __ror__(self, other: "ParameterDict") -> "ParameterDict":
        result = other.copy()
        result.update(self)
        return result

    def __ior__(self, other: "ParameterDict") -> "ParameterDict":
        self.update(other)
        return self
