"""Bad arguments to the public API get PyTorch's exception type and a message that says what is wrong.

A deterministic table: every public function (``corenn.*`` ops that PyTorch also has,
``corenn.nn.functional.*``) and every Tensor method is called with a plausible baseline
call, then with one argument at a time replaced by a bad value (wrong types, wrong
shapes, wrong dtypes, bad dims), with no arguments and with one too many. Whatever is
raised must be a TypeError, ValueError, IndexError, RuntimeError or NotImplementedError
whose message names the function or one of its parameters, never an internal leak
(AttributeError, KeyError, numpy's AxisError, ``<locals>``, a private ``_name``).
Calls that succeed are not judged here: corenn may accept what PyTorch refuses.

``python tests/test_fuzz_errors.py`` prints the counts and every offending call.
"""
from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn.ops import TENSOR_METHODS

ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError)

pytestmark = pytest.mark.filterwarnings("ignore")  # bad calls warn (broadcast targets, deprecated args): not judged

# Public callables that are not ops: they change process-wide state (fuzzing them would change
# the rest of the test run), or are corenn's own helpers with no PyTorch counterpart.
NOT_FUZZED = {
    # process-wide state
    "manual_seed", "seed", "set_default_dtype", "set_printoptions", "set_rng_state", "get_rng_state",
    "initial_seed", "get_default_dtype", "is_grad_enabled", "is_inference_mode_enabled",
    # corenn helpers, not PyTorch API
    "hookimpl", "erf_array", "getitem", "setitem", "to_copy", "check_tensor", "run",
    # Tensor methods with effects outside the tensor (hooks, autograd state, devices)
    "register_hook", "retain_grad", "backward", "cuda", "numpy",
}

# (function name, parameter or "*") -> why a bad call there may keep an unclear error. Keep it short.
EXEMPT: dict[tuple[str, str], str] = {
    ("multi_head_attention_forward", "*"): "PyTorch's shape checks (_mha_shape_check) raise AssertionError",
}


# ----------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------

def _float(*shape):
    return corenn.arange(int(np.prod(shape)), dtype=corenn.float32).reshape(*shape) / 7 + 0.5


# Bad values: a name and a factory (tensors are made fresh for every call: in-place methods
# and ``out=`` write into them).
BAD_VALUES = {
    "None": lambda: None,
    "str": lambda: "a",
    "list_of_str": lambda: ["a"],
    "dict": lambda: {},
    "float": lambda: 1.5,
    "object": lambda: object(),
    "int_big": lambda: 5,
    "int_negative": lambda: -5,
    "list_mixed": lambda: [0, "a"],
    "tuple_repeated": lambda: (0, 0),
    "int_tensor": lambda: corenn.arange(6).reshape(2, 3),
    "bool_tensor": lambda: corenn.ones(2, 3, dtype=corenn.bool),
    "scalar_tensor": lambda: corenn.tensor(1.5),
    "tensor_3d": lambda: _float(2, 3, 4),
    "tensor_empty": lambda: corenn.zeros(0),
    "tensor_mismatched": lambda: _float(4),
}

_TENSOR = lambda: _float(2, 3)  # noqa: E731
# Baseline value of a parameter, by its name; anything not listed is a (2, 3) float tensor.
BASELINE = {
    "dim": lambda: 1, "dim0": lambda: 0, "dim1": lambda: 1, "dim2": lambda: 1, "start_dim": lambda: 0,
    "end_dim": lambda: -1, "dims": lambda: 0, "source": lambda: 0, "destination": lambda: 1,
    "chunks": lambda: 2, "k": lambda: 1, "n": lambda: 3, "m": lambda: 3, "num_samples": lambda: 1,
    "steps": lambda: 3, "length": lambda: 1, "start": lambda: 0, "end": lambda: 5, "step": lambda: 1,
    "diagonal": lambda: 0, "diagonal_": lambda: 0, "offset": lambda: 0, "num_classes": lambda: 4,
    "num_groups": lambda: 1, "split_size_or_sections": lambda: 1, "indices_or_sections": lambda: 2,
    "output_size": lambda: 2, "kernel_size": lambda: 2, "shifts": lambda: 1, "size": lambda: (2, 3),
    "shape": lambda: (3, 2), "sizes": lambda: (2, 3), "normalized_shape": lambda: (3,), "pad": lambda: (1, 1),
    "equation": lambda: "ij->ji", "value": lambda: 1.0, "fill_value": lambda: 1.0, "exponent": lambda: 2.0,
    "min": lambda: 0.0, "max": lambda: 1.0, "low": lambda: 0, "high": lambda: 5, "data": lambda: [1.0, 2.0],
    "index": lambda: corenn.zeros(2, 3, dtype=corenn.int64), "indices": lambda: corenn.zeros(2, 3,
                                                                                            dtype=corenn.int64),
    "mask": lambda: corenn.ones(2, 3, dtype=corenn.bool), "condition": lambda: corenn.ones(2, 3, dtype=corenn.bool),
    "tensors": lambda: [_float(2, 3), _float(2, 3)], "operands": lambda: _float(2, 3),
    "target": lambda: corenn.zeros(2, dtype=corenn.int64), "p": lambda: 0.5, "src": _TENSOR,
    "array": lambda: np.ones(3, dtype=np.float32), "obj": _TENSOR, "mean": lambda: 0.0, "std": lambda: 1.0,
    "a": lambda: corenn.float32, "b": lambda: corenn.float64, "dtype": lambda: corenn.float32,
}
# Variadic parameters: how many baseline items they get.
VARARGS = {"size": (2, 3), "shape": (3, 2), "sizes": (2, 3), "dims": (1, 0), "tensors": None, "operands": None}


def _baseline(param):
    if param.kind is param.VAR_POSITIONAL:
        items = VARARGS.get(param.name)
        return [_TENSOR(), _TENSOR()] if items is None else list(items)
    factory = BASELINE.get(param.name)
    if factory is not None:
        return [factory()]
    if param.default is not param.empty:
        return []  # optional: left out of the baseline, mutated as a keyword
    return [_TENSOR()]


def _baseline_args(positional):
    args = []
    for p in positional:
        values = _baseline(p)
        if not values:
            break  # an optional parameter left out: later ones would shift into its place
        args += values
    return args


# Keyword-only parameters worth fuzzing (the rest, out=, device=, generator=, ..., are left alone).
KEYWORDS = {"dim", "keepdim", "dtype", "alpha", "beta", "value", "rounding_mode", "decimals", "correction",
            "as_tuple", "approximate"}


# ----------------------------------------------------------------------------------------------
# Calls
# ----------------------------------------------------------------------------------------------

@dataclass
class Call:
    name: str  # the public name (``Tensor.exp_`` for a method)
    target: object  # the function, or the method name
    args_factory: object  # () -> (receiver or None, args, kwargs)
    params: tuple = field(default_factory=tuple)
    what: str = ""  # which argument was made bad, and how
    function: object = None

    def run(self):
        receiver, args, kwargs = self.args_factory()
        if receiver is None:
            return self.target(*args, **kwargs)
        return getattr(receiver, self.target)(*args, **kwargs)

    def describe(self):
        return f"{self.name}: {self.what}"


def _signature(function):
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


def _calls_for(name, function, method=False, receiver=None):
    signature = _signature(function)
    if signature is None:
        return []
    params = list(signature.parameters.values())
    if method:
        params = params[1:]  # self / input is the receiver
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    keywords = [p for p in params if p.kind is p.KEYWORD_ONLY or
                (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)]
    param_names = tuple(p.name for p in signature.parameters.values() if p.name not in ("self",))
    make_receiver = receiver or _TENSOR
    target = name.rsplit(".", 1)[-1] if method else function

    def factory(slot=None, bad=None, keyword=None, extra=False, empty=False):
        def make():
            args = [] if empty else _baseline_args(positional)
            kwargs = {}
            if slot is not None:
                while len(args) <= slot:
                    args.append(_TENSOR())
                args[slot] = BAD_VALUES[bad]()
            if keyword is not None:
                kwargs[keyword] = BAD_VALUES[bad]()
            if extra:
                args.append(BAD_VALUES[bad]())
            return (make_receiver() if method else None), args, kwargs
        return make

    calls = []

    def add(what, make):
        calls.append(Call(name, target, make, param_names, what, function))

    add("baseline", factory())
    if any(p.default is p.empty and p.kind is not p.VAR_POSITIONAL for p in positional):
        add("no arguments", factory(empty=True))
    n_slots = len(factory()()[1])
    for slot in range(n_slots):
        for bad in BAD_VALUES:
            add(f"argument {slot} = {bad}", factory(slot=slot, bad=bad))
    for p in keywords:
        if p.name.startswith("_"):
            continue  # a private parameter kept for PyTorch's signature (softmax's _stacklevel): not user input
        if p.name in KEYWORDS or p.kind is p.POSITIONAL_OR_KEYWORD:
            for bad in BAD_VALUES:
                add(f"{p.name}= {bad}", factory(keyword=p.name, bad=bad))
    if not any(p.kind is p.VAR_POSITIONAL for p in positional):
        for bad in ("str", "int_big"):
            add(f"one argument too many ({bad})", factory(extra=True, bad=bad))
    return calls


def _public_functions():
    functions = {}
    for module, prefix in ((corenn, "corenn"), (F, "corenn.nn.functional")):
        for name in dir(module):
            value = getattr(module, name)
            if name.startswith("_") or name in NOT_FUZZED or isinstance(value, type) or not callable(value):
                continue
            functions[f"{prefix}.{name}"] = value
    return functions


def _tensor_methods():
    methods = {}
    for name in dir(corenn.Tensor):
        if name.startswith("_") or name in NOT_FUZZED:
            continue
        value = inspect.getattr_static(corenn.Tensor, name)
        if isinstance(value, (property, staticmethod, classmethod)) or not callable(value):
            continue
        methods[f"Tensor.{name}"] = value
    return methods


def all_calls():
    calls = []
    for name, function in _public_functions().items():
        calls += _calls_for(name, function)
    for name, function in _tensor_methods().items():
        method_name = name.split(".", 1)[1]
        calls += _calls_for(name, function, method=True)
        if method_name in TENSOR_METHODS or method_name.endswith("_"):
            # an integer receiver: float-only ops, in-place results that don't fit
            int_receiver = BAD_VALUES["int_tensor"]
            calls += [c for c in _calls_for(name, function, method=True, receiver=int_receiver)
                      if c.what == "baseline"]
    return calls


# ----------------------------------------------------------------------------------------------
# Judging an error
# ----------------------------------------------------------------------------------------------

_PRIVATE = re.compile(r"(?<![\w.'\"])_[A-Za-z]\w*")


def problem(call, error) -> str | None:
    """What is wrong with ``error`` as the answer to ``call``; None when it is a good error."""
    kind = type(error)
    if not isinstance(error, ALLOWED) or kind.__module__.split(".")[0] in ("numpy", "numba"):
        return f"bad type {kind.__module__}.{kind.__qualname__}"
    message = str(error)
    if "<locals>" in message:
        return "message shows <locals>"
    private = _PRIVATE.search(message)
    if private:
        return f"message shows a private name {private.group()!r}"
    words = set(re.findall(r"\w+", message))
    public = call.name.rsplit(".", 1)[-1]
    canonical = getattr(call.function, "__name__", public)  # an alias (``absolute``) may say ``abs``
    names = {public, public.rstrip("_"), canonical}
    names |= {name + "_cpu" for name in names}  # PyTorch's '"bitwise_and_cpu" not implemented for ...'
    if names & words or any(p in words for p in call.params):
        return None
    return "message names neither the function nor an argument"


def run_all(calls=None):
    """[(call, error, problem)] for every call that raised; the problem is None for a good error."""
    results = []
    for call in calls if calls is not None else all_calls():
        try:
            call.run()
        except Exception as error:  # noqa: BLE001 - judging every error is the point
            results.append((call, error, problem(call, error)))
    return results


def _exempt(call):
    name = call.name.rsplit(".", 1)[-1]
    return (name, "*") in EXEMPT or any((name, p) in EXEMPT for p in call.what.split())


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def results():
    return run_all()


def test_the_table_is_large_and_mostly_bad(results):
    calls = all_calls()
    assert len(calls) > 10_000
    assert len(results) > len(calls) // 2  # most calls are bad ones


def test_every_error_is_pytorchs_type_and_names_what_is_wrong(results):
    bad = [(call, error, why) for call, error, why in results if why is not None and not _exempt(call)]
    report = "\n".join(f"{call.describe()}: {why}: {type(error).__name__}: {str(error)[:200]}"
                       for call, error, why in bad[:60])
    assert not bad, f"{len(bad)} bad errors, the first ones:\n{report}"


def test_exemptions_are_still_needed(results):
    exempt_hit = {(call.name.rsplit(".", 1)[-1], key) for call, _, why in results if why is not None
                  for key in ["*"] + call.what.split() if (call.name.rsplit(".", 1)[-1], key) in EXEMPT}
    assert set(EXEMPT) <= exempt_hit, f"exemptions no longer needed: {set(EXEMPT) - exempt_hit}"


def test_arity_errors_name_the_public_function():
    with pytest.raises(TypeError, match=r"^exp\(\) takes 1 positional argument but 2 were given"):
        corenn.exp(corenn.ones(2), 1)
    with pytest.raises(TypeError, match=r"^eq\(\) takes 2 positional arguments but 3 were given"):
        corenn.eq(corenn.ones(2), 1, 2)


def test_non_tensor_input_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match=r"^mean\(\): argument 'input' must be Tensor, not NoneType"):
        corenn.mean(None, 0)
    with pytest.raises(TypeError, match=r"^mm\(\): argument 'mat2' must be Tensor, not str"):
        corenn.mm(corenn.ones(2, 2), "a")
    with pytest.raises(TypeError, match=r"^sum\(\): argument 'dim' must be int, not str"):
        corenn.sum(corenn.ones(2), [0, "a"])
    with pytest.raises(TypeError, match=r"^softmax\(\): argument 'dim' must be int, not float"):
        corenn.softmax(corenn.ones(2), 1.5)


def test_dims_sizes_and_dtypes_are_checked_in_the_front_end():
    with pytest.raises(IndexError, match=r"^sum\(\): Dimension out of range \(expected to be in range of \[-2, 1\], "
                                         r"but got 5\)"):
        corenn.ones(2, 3).sum(5)
    with pytest.raises(TypeError, match=r"^zeros\(\): argument 'size' must be a sequence of integers, got str"):
        corenn.zeros("a")
    with pytest.raises(TypeError, match=r"^reshape\(\): argument 'shape' must be a sequence of ints, got str"):
        corenn.ones(6).reshape(2, "x")
    with pytest.raises(RuntimeError, match=r"^zeros\(\): Trying to create tensor with negative dimension -1"):
        corenn.zeros(-1)
    with pytest.raises(TypeError, match=r"^ones\(\): dtype must be a corenn.dtype such as corenn.float32, not str"):
        corenn.ones(2, dtype="float32")
    with pytest.raises(TypeError, match=r"^sum\(\): dtype must be a corenn.dtype"):
        corenn.ones(2).sum(dtype=1)


def test_errors_name_the_function_the_user_called():
    # lerp fails inside sub; a layer fails inside F.linear; a 0-d tensor's bool is asked inside relu
    with pytest.raises(RuntimeError, match=r"^lerp\(\): The size of tensor a \(4\) must match"):
        corenn.lerp(corenn.ones(3), corenn.ones(4), 0.5)
    with pytest.raises(RuntimeError, match=r"^linear\(\): mat1 and mat2 shapes cannot be multiplied"):
        corenn.nn.Linear(3, 2)(corenn.ones(2, 4))
    with pytest.raises(RuntimeError, match=r"^relu\(\): Boolean value of Tensor with 2 values is ambiguous"):
        corenn.nn.functional.relu(corenn.ones(2), inplace=corenn.ones(2))
    # kernel failures come out with PyTorch's type (numpy's AxisError / UFuncTypeError do not leak)
    with pytest.raises(TypeError, match=r"^sum\(\): "):
        corenn.ones(2, 3).sum(0, keepdim="a")


def test_the_callers_own_code_is_not_renamed():
    def user_function(t):
        return corenn.ones(2, 3).sum(t)

    with pytest.raises(IndexError, match=r"^sum\(\): Dimension out of range"):
        user_function(5)
    with pytest.raises(RuntimeError, match=r"^Boolean value of Tensor with 2 values is ambiguous"):
        bool(corenn.ones(2))
    with pytest.raises(IndexError, match=r"^index 5 is out of bounds for dimension 0 with size 3"):
        corenn.ones(3)[5]


def test_tensor_where_takes_the_condition_first_as_in_pytorch():
    x = corenn.tensor([1.0, 2.0])
    assert x.where(corenn.tensor([True, False]), 0.0).tolist() == [1.0, 0.0]


def _to_torch(value, torch):
    if isinstance(value, corenn.Tensor):
        return torch.from_numpy(value.numpy().copy())
    if isinstance(value, corenn.dtype):
        return getattr(torch, str(value).split(".")[-1])
    if isinstance(value, list):
        return [_to_torch(v, torch) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_torch(v, torch) for v in value)
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _torch_target(call, torch):
    if isinstance(call.target, str):
        return None if not hasattr(torch.Tensor, call.target) else call.target
    module, name = call.name.rsplit(".", 1)
    owner = torch.nn.functional if module == "corenn.nn.functional" else torch
    return getattr(owner, name, None)


# Where corenn's exception type differs from PyTorch's on purpose: function name -> why.
TYPE_PARITY_EXEMPT = {
    "tensor": "data that is no number (None, a dict): TypeError, what Python raises for a value of the wrong type; "
              "PyTorch raises RuntimeError('Could not infer dtype')",
    "as_tensor": "as for tensor",
}

# The kinds of bad call whose exception type is compared with PyTorch's: a plain Python value
# where a function's first tensor goes, a dim out of range, a dim of the wrong type. (Other kinds
# of bad call often hold two faults at once, and the two libraries check in different orders.)
_INPUT_KINDS = {"argument 0 = None", "argument 0 = str", "argument 0 = dict", "argument 0 = object"}
_DIM_KINDS = {"dim= int_big", "dim= int_negative", "dim= str", "dim= float", "dim= object", "dim= list_of_str"}


def _torch_error(call, torch):
    """What PyTorch raises for the same call: an exception, None when it succeeds, or "skip"."""
    target = _torch_target(call, torch)
    if target is None:
        return "skip"
    receiver, args, kwargs = call.args_factory()
    args, kwargs = _to_torch(args, torch), {k: _to_torch(v, torch) for k, v in kwargs.items()}
    try:
        if isinstance(target, str):
            getattr(_to_torch(receiver, torch), target)(*args, **kwargs)
        else:
            target(*args, **kwargs)
    except Exception as error:  # noqa: BLE001
        return error
    return None


@pytest.mark.filterwarnings("ignore")
def test_error_types_match_pytorch(results, torch):
    """Where corenn and PyTorch both refuse a call of the compared kinds, they raise the same exception type.

    PyTorch's own AttributeErrors (``'NoneType' object has no attribute 'size'`` from its Python
    layer) are not compared: corenn's TypeError is the better answer.
    """
    mismatches, compared = [], 0
    for call, error, _ in results:
        compared_kind = call.what in _DIM_KINDS or (call.what in _INPUT_KINDS and not isinstance(call.target, str))
        if not compared_kind or call.name.rsplit(".", 1)[-1] in TYPE_PARITY_EXEMPT:
            continue
        torch_error = _torch_error(call, torch)
        if torch_error in ("skip", None) or isinstance(torch_error, AttributeError):
            continue
        compared += 1
        if type(torch_error) is not type(error):
            mismatches.append(f"{call.describe()}: corenn {type(error).__name__}: {str(error)[:90]} | torch "
                              f"{type(torch_error).__name__}: {str(torch_error)[:90]}")
    assert compared > 500
    assert not mismatches, f"{len(mismatches)} of {compared}:\n" + "\n".join(mismatches[:40])


if __name__ == "__main__":
    from collections import Counter
    calls = all_calls()
    outcome = run_all(calls)
    bad = [(c, e, w) for c, e, w in outcome if w is not None]
    print(f"{len(calls)} calls, {len(outcome)} raised, {len(bad)} bad errors")
    print(Counter(w.split(" '")[0] if w.startswith("message shows a private") else w for _, _, w in bad))
    by_type = Counter(type(e).__name__ for _, e, w in bad if w.startswith("bad type"))
    print(by_type)
    if "-v" in sys.argv:
        for call, error, why in bad:
            print(f"{call.describe()}: {why}: {type(error).__name__}: {str(error)[:160]}")
