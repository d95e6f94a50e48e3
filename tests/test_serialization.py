"""corenn.save / corenn.load: round trips, tied tensors, atomic writes, and hostile files."""
from __future__ import annotations

import collections
import io
import json
import math
import os
import pickle
import re
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

import corenn
from corenn import serialization
from corenn.serialization import CheckpointError

# The child process of the kill test must import the same corenn as this test does.
CORENN_PARENT_DIR = str(Path(corenn.__file__).resolve().parents[1])

ALL_DTYPES = [corenn.float16, corenn.float32, corenn.float64, corenn.int8, corenn.int16, corenn.int32,
              corenn.int64, corenn.uint8, corenn.bool]


# --------------------------------------------------------------------------- helpers


def round_trip(obj, path):
    corenn.save(obj, path)
    return corenn.load(path)


def assert_same(actual, expected, where="obj"):
    """Deep equality that also checks types, key order, dtypes and float bit patterns."""
    if isinstance(expected, corenn.Tensor):
        assert isinstance(actual, corenn.Tensor), f"{where}: expected a tensor, got {type(actual)}"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert tuple(actual.shape) == tuple(expected.shape), f"{where}: shape differs"
        assert not actual.requires_grad, f"{where}: loaded tensors must not require grad"
        got, want = actual.detach().numpy(), expected.detach().numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=where)
        # Bit-exact as well: -0.0 vs 0.0 and nan payloads must survive.
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), where
        return
    assert type(actual) is type(expected), f"{where}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{where}: keys or key order differ"
        for (ka, va), (ke, ve) in zip(actual.items(), expected.items()):
            assert type(ka) is type(ke), f"{where}: key {ka!r} changed type"
            assert_same(va, ve, f"{where}[{_key_repr(ke)}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: length differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        # Bit-exact: distinguishes -0.0 from 0.0 and lets nan equal nan.
        assert struct.pack("<d", actual) == struct.pack("<d", expected) or (math.isnan(actual) and math.isnan(expected)), \
            f"{where}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{where}: {_key_repr(actual)} != {_key_repr(expected)}"


def _key_repr(key) -> str:
    try:
        return repr(key)
    except ValueError:  # an int beyond Python's int -> str digit limit
        return f"<int of {key.bit_length()} bits>"


def sample_values(dtype):
    """Values that exercise each dtype's range."""
    numpy_dtype = corenn._dtype.to_numpy(dtype)
    if numpy_dtype == np.bool_:
        return np.array([[True, False, True], [False, False, True]])
    if numpy_dtype.kind == "f":
        info = np.finfo(numpy_dtype)
        return np.array([[0.0, -0.0, 1.5, -2.25], [info.max, info.tiny, np.inf, -np.inf]], dtype=numpy_dtype)
    info = np.iinfo(numpy_dtype)
    return np.array([[info.min, -1 if info.min < 0 else 0, 0, 1, info.max]], dtype=numpy_dtype)


def checkpoint_bytes(obj) -> bytes:
    buffer = io.BytesIO()
    corenn.save(obj, buffer)
    return buffer.getvalue()


def raw_safetensors(header: dict, data: bytes) -> bytes:
    """A file with exactly this header JSON and data section, for hand-crafted bad files."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def corenn_file(structure, arrays: dict[str, np.ndarray]) -> bytes:
    """A well-formed corenn file with the given (possibly hostile) structure and a valid checksum,

    so that what the loader rejects is the structure itself, not a checksum mismatch.
    """
    structure_json = json.dumps(structure)
    metadata = {"corenn.format": "1", "corenn.structure": structure_json,
                "corenn.checksum": serialization._checksum(structure_json, arrays)}
    return safetensors.numpy.save(arrays, metadata=metadata)


@contextmanager
def time_limit(seconds):
    """Turns a hang into a test failure (SIGALRM interrupts the main thread)."""
    if not hasattr(signal, "SIGALRM"):  # Windows: no watchdog, the test still runs
        yield
        return
    def on_alarm(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def optimizer_like_state():
    return {
        "state": {
            0: {"step": 3, "exp_avg": corenn.tensor([0.1, 0.2]), "exp_avg_sq": corenn.tensor([1e-4, 2e-4])},
            1: {"step": 3, "exp_avg": corenn.tensor([[0.5]]), "exp_avg_sq": corenn.tensor([[0.25]])},
        },
        "param_groups": [{"lr": 0.1, "params": [0, 1], "betas": (0.9, 0.999), "eps": 1e-8,
                          "weight_decay": 0, "amsgrad": False, "foreach": None, "name": "default"}],
    }


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_round_trips_exactly(tmp_path, dtype):
    original = corenn.from_numpy(sample_values(dtype))
    loaded = round_trip({"x": original}, tmp_path / "c.safetensors")["x"]
    assert loaded.dtype == dtype
    assert_same(loaded, original)


def test_containers_keep_their_types_key_types_and_order(tmp_path):
    obj = {
        "z_first": 1,  # not alphabetical: order must be kept, not sorted
        "a_list": [1, "two", 3.0, None, True, [], ()],
        "a_tuple": (1, (2, (3,)), {"in": "tuple"}),
        0: "int key",
        "0": "str key that looks like the int key",
        -7: {"negative int key": False},
        "empty": {"dict": {}, "list": [], "tuple": (), "odict": collections.OrderedDict()},
        "text": "ünïcødé \u2603 and a \x00 byte",
        "big_int": 2**100,
        "neg_int": -(2**63),
    }
    assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)


def test_ordered_dict_comes_back_as_ordered_dict_and_dict_as_dict(tmp_path):
    state = collections.OrderedDict([("fc.weight", corenn.tensor([[1.0, 2.0]])), ("fc.bias", corenn.tensor([3.0]))])
    loaded = round_trip({"model": state, "plain": {"b": 1, "a": 2}}, tmp_path / "c.safetensors")
    assert type(loaded["model"]) is collections.OrderedDict
    assert type(loaded["plain"]) is dict
    assert list(loaded["model"]) == ["fc.weight", "fc.bias"]
    assert list(loaded["plain"]) == ["b", "a"]
    assert_same(loaded["model"], state)


def test_optimizer_state_round_trips_with_int_keys_and_tuples(tmp_path):
    state = optimizer_like_state()
    loaded = round_trip(state, tmp_path / "optim.safetensors")
    assert_same(loaded, state)
    assert list(loaded["state"]) == [0, 1]
    assert loaded["param_groups"][0]["betas"] == (0.9, 0.999)


@pytest.mark.parametrize("value", [0.1, 1 / 3, -0.0, 0.0, 5e-324, 1.7976931348623157e308,
                                   float("inf"), float("-inf"), float("nan")], ids=repr)
def test_floats_are_exact_including_inf_and_nan(tmp_path, value):
    loaded = round_trip({"v": value}, tmp_path / "c.safetensors")["v"]
    assert_same(loaded, value)


def test_numpy_scalars_are_stored_as_python_numbers(tmp_path):
    loaded = round_trip({"f": np.float32(0.5), "i": np.int64(7), "b": np.bool_(True)}, tmp_path / "c.safetensors")
    assert_same(loaded, {"f": 0.5, "i": 7, "b": True})


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (2, 0, 4), (1,), (1, 1, 1)], ids=str)
def test_zero_dim_and_empty_tensors(tmp_path, shape):
    original = corenn.from_numpy(np.asarray(np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 0.5))
    loaded = round_trip({"t": original}, tmp_path / "c.safetensors")["t"]
    assert tuple(loaded.shape) == shape
    assert_same(loaded, original)


def test_a_bare_tensor_and_a_bare_list_round_trip(tmp_path):
    tensor = corenn.tensor([1.0, 2.0])
    assert_same(round_trip(tensor, tmp_path / "t.safetensors"), tensor)
    items = [corenn.tensor([1]), corenn.tensor([2])]
    assert_same(round_trip(items, tmp_path / "l.safetensors"), items)
    assert_same(round_trip(None, tmp_path / "n.safetensors"), None)


def test_non_contiguous_tensors_keep_their_values(tmp_path):
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    transposed = corenn.from_numpy(base.T)
    strided = corenn.from_numpy(base[::2, ::3])
    reversed_ = corenn.from_numpy(base[:, ::-1])
    loaded = round_trip({"t": transposed, "s": strided, "r": reversed_}, tmp_path / "c.safetensors")
    np.testing.assert_array_equal(loaded["t"].numpy(), base.T)
    np.testing.assert_array_equal(loaded["s"].numpy(), base[::2, ::3])
    np.testing.assert_array_equal(loaded["r"].numpy(), base[:, ::-1])


def test_parameters_come_back_as_plain_tensors_without_grad(tmp_path):
    weight = corenn.tensor([[1.0, -1.0]], requires_grad=True)
    loaded = round_trip({"weight": weight}, tmp_path / "c.safetensors")["weight"]
    assert loaded.requires_grad is False
    np.testing.assert_array_equal(loaded.numpy(), [[1.0, -1.0]])


def test_loaded_tensors_are_writable_and_independent_of_the_saved_ones(tmp_path):
    original = corenn.tensor([1.0, 2.0])
    loaded = round_trip({"w": original}, tmp_path / "c.safetensors")["w"]
    loaded.numpy()[0] = 42.0
    assert original.numpy()[0] == 1.0
    original.numpy()[1] = -5.0
    assert loaded.numpy()[1] == 2.0


# --------------------------------------------------------------------------- tied tensors


def test_the_same_tensor_object_is_stored_once_and_comes_back_as_one_object(tmp_path):
    shared = corenn.tensor([1.0, 2.0, 3.0])
    path = tmp_path / "tied.safetensors"
    loaded = round_trip({"encoder.embed": shared, "decoder.embed": shared, "nested": [shared]}, path)
    assert loaded["encoder.embed"] is loaded["decoder.embed"] is loaded["nested"][0]
    loaded["encoder.embed"].numpy()[0] = 100.0
    assert loaded["decoder.embed"].numpy()[0] == 100.0
    with safe_open(path, framework="np") as f:
        assert list(f.keys()) == ["encoder.embed"]


def test_distinct_tensors_over_the_same_memory_come_back_sharing_memory(tmp_path):
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    first, second = corenn.from_numpy(array), corenn.from_numpy(array.view())  # two ndarrays, one buffer
    third = first.detach()
    path = tmp_path / "tied.safetensors"
    loaded = round_trip({"a": first, "b": second, "c": third}, path)
    assert loaded["a"] is not loaded["b"]
    loaded["a"].numpy()[1, 2] = -1.0
    assert loaded["b"].numpy()[1, 2] == -1.0
    assert loaded["c"].numpy()[1, 2] == -1.0
    with safe_open(path, framework="np") as f:
        assert len(list(f.keys())) == 1


def test_partially_overlapping_views_are_stored_separately(tmp_path):
    array = np.arange(6, dtype=np.float32)
    whole, tail, transposed_pair = (corenn.from_numpy(array), corenn.from_numpy(array[2:]),
                                    corenn.from_numpy(array.reshape(2, 3).T))
    path = tmp_path / "views.safetensors"
    loaded = round_trip({"whole": whole, "tail": tail, "t": transposed_pair}, path)
    np.testing.assert_array_equal(loaded["tail"].numpy(), array[2:])
    loaded["whole"].numpy()[3] = 99.0
    assert loaded["tail"].numpy()[1] == 3.0  # documented: no longer shared
    with safe_open(path, framework="np") as f:
        assert sorted(f.keys()) == ["t", "tail", "whole"]


# --------------------------------------------------------------------------- unsupported objects


@pytest.mark.parametrize("bad, type_name", [
    (lambda x: x, "function"),
    (object(), "object"),
    ({1, 2}, "set"),
    (b"bytes", "bytes"),
    (1 + 2j, "complex"),
    (np.array([None]), "dtype object"),  # numpy arrays are stored (test_serialization_fileobj.py), object ones not
    (collections.defaultdict(list), "defaultdict"),
])
def test_unsupported_values_raise_type_error_naming_their_path(tmp_path, bad, type_name):
    obj = {"state": {3: {"ok": 1, "foo": bad}}}
    path = tmp_path / "c.safetensors"
    with pytest.raises(TypeError) as info:
        corenn.save(obj, path)
    message = str(info.value)
    assert "obj['state'][3]['foo']" in message
    assert type_name in message
    assert not path.exists()  # nothing is written before the whole object is checked


def test_unsupported_value_leaves_an_existing_checkpoint_untouched(tmp_path):
    path = tmp_path / "c.safetensors"
    corenn.save({"v": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"obj\['items'\]\[1\]"):
        corenn.save({"v": 2, "items": [1, print]}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.safetensors"]


@pytest.mark.parametrize("key", [1.5, True, None, ("a", "b")], ids=repr)
def test_unsupported_dict_keys_raise_type_error(tmp_path, key):
    with pytest.raises(TypeError, match=r"dict key .* at obj\['outer'\]: keys must be str or int"):
        corenn.save({"outer": {key: 1}}, tmp_path / "c.safetensors")


def test_a_reference_cycle_is_refused(tmp_path):
    cycle = {"a": []}
    cycle["a"].append(cycle)
    with pytest.raises(ValueError, match=r"obj\['a'\]\[0\] contains itself"):
        corenn.save(cycle, tmp_path / "c.safetensors")


# --------------------------------------------------------------------------- interoperability


def test_corenn_files_open_with_safetensors_under_readable_names(tmp_path):
    path = tmp_path / "c.safetensors"
    model = collections.OrderedDict([("fc.weight", corenn.tensor([[1.0, 2.0]])), ("fc.bias", corenn.tensor([0.5]))])
    optimizer = {"state": {0: {"momentum_buffer": corenn.tensor([[0.1, 0.2]])}}, "param_groups": [{"lr": 0.1}]}
    corenn.save({"model": model, "optimizer": optimizer}, path)
    with safe_open(path, framework="np") as f:
        names = set(f.keys())
        assert names == {"model.fc.weight", "model.fc.bias", "optimizer.state.0.momentum_buffer"}
        np.testing.assert_array_equal(f.get_tensor("model.fc.weight"), np.float32([[1.0, 2.0]]))
        np.testing.assert_array_equal(f.get_tensor("optimizer.state.0.momentum_buffer"), np.float32([[0.1, 0.2]]))
        assert f.metadata()["corenn.format"] == "1"
    # A top-level state dict gets exactly its keys as names.
    corenn.save(model, path)
    assert set(safetensors.numpy.load_file(path)) == {"fc.weight", "fc.bias"}


def test_colliding_names_are_made_unique_and_still_load(tmp_path):
    obj = {"a.b": corenn.tensor([1.0]), "a": {"b": corenn.tensor([2.0])}, "__metadata__": corenn.tensor([3.0])}
    path = tmp_path / "c.safetensors"
    assert_same(round_trip(obj, path), obj)
    with safe_open(path, framework="np") as f:
        assert len(list(f.keys())) == 3


def test_plain_safetensors_file_loads_as_flat_dict_in_file_order(tmp_path):
    path = tmp_path / "plain.safetensors"
    arrays = {"layer.weight": np.ones((2, 3), np.float32), "layer.bias": np.zeros(2, np.float64),
              "steps": np.array(7, np.int64), "mask": np.array([True, False])}
    safetensors.numpy.save_file(arrays, path, metadata={"format": "np"})
    loaded = corenn.load(path)
    with safe_open(path, framework="np") as f:
        header_length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8:8 + header_length])
    file_order = [name for name in header if name != "__metadata__"]
    assert type(loaded) is dict
    assert list(loaded) == file_order
    for name, array in arrays.items():
        assert loaded[name].dtype == corenn._dtype.from_numpy(array.dtype)
        np.testing.assert_array_equal(loaded[name].numpy(), array)


# --------------------------------------------------------------------------- paths, files, map_location


def test_path_like_str_and_file_objects_are_accepted(tmp_path):
    obj = {"w": corenn.tensor([1.0, 2.0]), "n": 3}
    assert_same(round_trip(obj, str(tmp_path / "s.safetensors")), obj)
    assert_same(round_trip(obj, tmp_path / "p.safetensors"), obj)
    buffer = io.BytesIO()
    corenn.save(obj, buffer)
    buffer.seek(0)
    assert_same(corenn.load(buffer), obj)
    with open(tmp_path / "f.safetensors", "wb") as f:
        corenn.save(obj, f)
    with open(tmp_path / "f.safetensors", "rb") as f:
        assert_same(corenn.load(f), obj)


def test_text_mode_file_object_is_refused(tmp_path):
    corenn.save({"n": 1}, tmp_path / "c.safetensors")
    with open(tmp_path / "c.safetensors", encoding="latin-1") as f:
        with pytest.raises(TypeError, match="text mode"):
            corenn.load(f)


def test_bad_path_argument_types_raise_type_error():
    with pytest.raises(TypeError, match="path"):
        corenn.save({}, 123)
    with pytest.raises(TypeError, match="path"):
        corenn.load(123)


@pytest.mark.parametrize("location", [None, "cpu", "device"])
def test_map_location_cpu_variants(tmp_path, location):
    if location == "device":
        location = corenn.device("cpu")
    loaded = round_trip({"w": corenn.tensor([1.0])}, tmp_path / "c.safetensors")
    loaded = corenn.load(tmp_path / "c.safetensors", map_location=location)
    assert loaded["w"].device.type == "cpu"
    np.testing.assert_array_equal(loaded["w"].numpy(), [1.0])


@pytest.mark.parametrize("location", [lambda storage, loc: storage, {"cuda:0": "cpu"}, 0], ids=["callable", "dict", "int"])
def test_unsupported_map_location_raises_type_error(tmp_path, location):
    corenn.save({"w": corenn.tensor([1.0])}, tmp_path / "c.safetensors")
    with pytest.raises(TypeError, match="map_location"):
        corenn.load(tmp_path / "c.safetensors", map_location=location)


def test_unknown_device_string_raises_from_corenn_device(tmp_path):
    corenn.save({"w": corenn.tensor([1.0])}, tmp_path / "c.safetensors")
    with pytest.raises(Exception) as info:
        corenn.device("no_such_device")
    with pytest.raises(type(info.value)):
        corenn.load(tmp_path / "c.safetensors", map_location="no_such_device")


@pytest.mark.parametrize("weights_only", [True, False, None])
def test_weights_only_is_accepted(tmp_path, weights_only):
    corenn.save({"w": corenn.tensor([1.0])}, tmp_path / "c.safetensors")
    loaded = corenn.load(tmp_path / "c.safetensors", weights_only=weights_only)
    np.testing.assert_array_equal(loaded["w"].numpy(), [1.0])


# --------------------------------------------------------------------------- atomic writes


TEMP_NAME = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


def test_overwrite_replaces_the_file_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "c.safetensors"
    corenn.save({"v": 1}, path)
    corenn.save({"v": 2}, path)
    assert corenn.load(path) == {"v": 2}
    assert os.listdir(tmp_path) == ["c.safetensors"]


def test_failure_during_write_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    corenn.save({"v": 1}, path)

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(serialization.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        corenn.save({"v": 2, "w": corenn.tensor([1.0] * 1000)}, path)
    monkeypatch.undo()
    assert corenn.load(path) == {"v": 1}
    assert os.listdir(tmp_path) == ["c.safetensors"]


def test_saving_onto_a_directory_or_into_a_missing_directory_fails_cleanly(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError):
        corenn.save({"v": 1}, tmp_path / "adir")
    assert sorted(os.listdir(tmp_path)) == ["adir"]
    assert os.listdir(tmp_path / "adir") == []
    with pytest.raises(FileNotFoundError):
        corenn.save({"v": 1}, tmp_path / "missing" / "c.safetensors")


def test_replacing_a_private_checkpoint_keeps_its_permissions(tmp_path):
    path = tmp_path / "c.safetensors"
    corenn.save({"v": 1}, path)
    path.chmod(0o600)
    corenn.save({"v": 2}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert corenn.load(path) == {"v": 2}


def test_saving_through_a_symlink_replaces_its_target(tmp_path):
    target = tmp_path / "real.safetensors"
    link = tmp_path / "latest.safetensors"
    corenn.save({"v": 1}, target)
    link.symlink_to(target.name)
    corenn.save({"v": 2}, link)
    assert link.is_symlink()
    assert corenn.load(target) == {"v": 2}


def test_temp_file_is_created_next_to_the_target_with_a_recognisable_name(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spying_replace(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(serialization.os, "replace", spying_replace)
    corenn.save({"v": 1}, tmp_path / "c.safetensors")
    ((directory, temp_name, target_name),) = seen
    assert directory == str(tmp_path)
    assert target_name == "c.safetensors"
    assert temp_name.startswith(f".c.safetensors.tmp-{os.getpid()}-")
    assert TEMP_NAME.match(temp_name)


KILL_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import corenn
    path, count = sys.argv[1], int(sys.argv[2])
    weights = np.empty(count, dtype=np.float32)
    version = 0
    while True:
        version += 1
        weights.fill(version)
        corenn.save({"version": version, "weights": corenn.from_numpy(weights)}, path)
        print(version, flush=True)
""")


def _save_in_a_child_and_kill_it(script, path, env):
    """Run the saving child until one save is complete, SIGKILL it mid-save.

    Returns the last version the child reported as saved and whether the kill came while
    a temp file existed (i.e. in the middle of a save).
    """
    child = subprocess.Popen([sys.executable, str(script), str(path), str(8_000_000)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        with time_limit(120):
            first_line = child.stdout.readline()
            if not first_line:
                pytest.fail(f"the saving child process died: {child.stderr.read()}")
            last_done = int(first_line)
            killed_mid_save = False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if any(name.startswith(f".{path.name}.tmp-{child.pid}-") for name in os.listdir(path.parent)):
                    child.send_signal(signal.SIGKILL)
                    killed_mid_save = True
                    break
                time.sleep(0.0005)
            else:
                child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            for line in child.stdout.read().split():  # saves completed before the kill
                last_done = int(line)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    return last_done, killed_mid_save


@pytest.mark.slow
def test_sigkill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    """A child saving a 32 MB checkpoint in a loop is SIGKILLed while a temp file exists."""
    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)
    directory = tmp_path / "ckpts"
    directory.mkdir()
    path = directory / "model.safetensors"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([CORENN_PARENT_DIR, os.environ.get("PYTHONPATH", "")]))
    mid_save_kills = 0
    for _ in range(3):
        last_done, killed_mid_save = _save_in_a_child_and_kill_it(script, path, env)
        mid_save_kills += killed_mid_save
        loaded = corenn.load(path)
        assert loaded["version"] in (last_done, last_done + 1)  # +1: killed between rename and print
        weights = loaded["weights"].numpy()
        assert weights.shape == (8_000_000,)
        assert weights.min() == weights.max() == loaded["version"]
        # Only the checkpoint itself looks like a checkpoint; leftovers are recognisable temps.
        leftovers = [name for name in os.listdir(directory) if name != path.name]
        assert all(TEMP_NAME.match(name) for name in leftovers), leftovers
        assert sorted(p.name for p in directory.glob("*.safetensors")) == [path.name]
        for name in leftovers:
            try:  # a partial temp is detected as broken, or it was complete when the kill came
                assert corenn.load(directory / name)["weights"].numpy().shape == (8_000_000,)
            except CheckpointError:
                pass
            os.unlink(directory / name)
    assert mid_save_kills >= 1


# --------------------------------------------------------------------------- bad files


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        corenn.load(tmp_path / "nope.safetensors")


def test_directory_raises_is_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError):
        corenn.load(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with time_limit(10), pytest.raises(CheckpointError, match="not a regular file"):
        corenn.load(fifo)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.safetensors"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match=re.escape(f"{path}: file is empty")):
        corenn.load(path)


def test_truncated_files_name_the_path_and_the_missing_bytes(tmp_path):
    good = checkpoint_bytes({"w": corenn.from_numpy(np.zeros(1024, np.float32)), "step": 1})
    header_length = struct.unpack("<Q", good[:8])[0]
    path = tmp_path / "t.safetensors"
    path.write_bytes(good[:8 + header_length + 1000])
    with pytest.raises(CheckpointError, match=re.escape(
            f"{path}: file is truncated (header says 4096 bytes of tensor data, file has 1000)")):
        corenn.load(path)
    for cut in (3, 8, 20, 8 + header_length - 1, len(good) - 1):
        path.write_bytes(good[:cut])
        with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*truncated"):
            corenn.load(path)


def test_trailing_garbage_is_corruption(tmp_path):
    path = tmp_path / "c.safetensors"
    path.write_bytes(checkpoint_bytes({"w": corenn.tensor([1.0])}) + b"\x00junk")
    with pytest.raises(CheckpointError, match="5 unexpected bytes"):
        corenn.load(path)


def test_a_flipped_bit_in_tensor_data_is_detected_by_the_checksum(tmp_path):
    data = bytearray(checkpoint_bytes({"w": corenn.from_numpy(np.arange(100, dtype=np.float32))}))
    data[-7] ^= 0x10
    path = tmp_path / "c.safetensors"
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        corenn.load(path)


@pytest.mark.parametrize("content", [
    b"hello, this is not a checkpoint at all",
    b"\xff" * 64,
    bytes(range(256)) * 4,
    struct.pack("<Q", 2**63) + b"{}",
    struct.pack("<Q", 10) + b"[1,2,3,4,5]",
    struct.pack("<Q", 4) + b"null",
    struct.pack("<Q", 2) + b"\xc3\x28",
], ids=["text", "ff", "ramp", "huge-length", "json-list", "json-null", "bad-utf8"])
def test_foreign_and_random_bytes_raise_checkpoint_error(tmp_path, content):
    path = tmp_path / "x.ckpt"
    path.write_bytes(content)
    with time_limit(10), pytest.raises(CheckpointError, match=re.escape(str(path))):
        corenn.load(path)


class _CreatesFileWhenUnpickled:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickles_are_refused_and_never_executed(tmp_path, protocol):
    canary = tmp_path / "pwned"
    for i, payload in enumerate([pickle.dumps(os.system, protocol=protocol),
                                 pickle.dumps(_CreatesFileWhenUnpickled(str(canary)), protocol=protocol)]):
        path = tmp_path / f"model{i}.pt"
        path.write_bytes(payload)
        with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*pickle"):
            corenn.load(path)
    assert not canary.exists()
    # Sanity check that the payload is real: pickle itself would have created the file.
    pickle.loads(pickle.dumps(_CreatesFileWhenUnpickled(str(canary)))).close()
    assert canary.exists()


@pytest.mark.parametrize("header_length", [0x280, 0x380, 0x480, 0x580])
def test_valid_files_whose_length_bytes_look_like_a_pickle_marker_still_load(tmp_path, header_length):
    # 0x280 as little-endian bytes is b"\x80\x02...", a pickle's protocol-2 opening.
    for padding in range(header_length):
        obj = {"w": corenn.tensor([1.0]), "pad": "x" * padding}
        data = checkpoint_bytes(obj)
        if struct.unpack("<Q", data[:8])[0] == header_length:
            break
    else:
        pytest.fail(f"could not build a header of {header_length} bytes")
    assert data[:1] == b"\x80"
    path = tmp_path / "c.safetensors"
    path.write_bytes(data)
    assert_same(corenn.load(path), obj)


def test_zip_archives_like_pytorch_pt_files_are_refused(tmp_path):
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"w": [1.0]}))
        archive.writestr("archive/version", "3\n")
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*zip"):
        corenn.load(path)


def _header_case(name):
    """Hand-made headers that are wrong in one specific way."""
    four_floats = struct.pack("<4f", 1, 2, 3, 4)
    cases = {
        "out-of-bounds": ({"w": {"dtype": "F32", "shape": [1024], "data_offsets": [0, 4096]}}, four_floats,
                          "file is truncated (header says 4096 bytes of tensor data, file has 16)"),
        "offsets-beyond-end": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}, four_floats,
                               "gap"),
        "overlapping": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, four_floats, "overlaps"),
        "shape-mismatch": ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, four_floats,
                           "needs 12 bytes"),
        "unknown-dtype": ({"w": {"dtype": "Q99", "shape": [4], "data_offsets": [0, 16]}}, four_floats,
                          "unknown dtype"),
        "uint32": ({"w": {"dtype": "U32", "shape": [4], "data_offsets": [0, 16]}}, four_floats,
                   "U32, which corenn does not support"),  # (BF16 is supported: tests/test_bfloat16.py)
        "negative-shape": ({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, four_floats,
                           "invalid shape"),
        "bool-shape": ({"w": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, four_floats[:4],
                       "invalid shape"),
        "float-offsets": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0.0, 16.0]}}, four_floats,
                          "invalid data_offsets"),
        "reversed-offsets": ({"w": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}, four_floats,
                             "invalid data_offsets"),
        "entry-not-object": ({"w": [1, 2]}, four_floats, "not a JSON object"),
        "metadata-not-strings": ({"__metadata__": {"a": 1}, "w": {"dtype": "F32", "shape": [4],
                                                                 "data_offsets": [0, 16]}},
                                 four_floats, "__metadata__"),
        "too-many-dims": ({"w": {"dtype": "U8", "shape": [1] * 65, "data_offsets": [0, 1]}}, b"\x00",
                          "invalid shape"),
    }
    return cases[name]


@pytest.mark.parametrize("case", ["out-of-bounds", "offsets-beyond-end", "overlapping", "shape-mismatch",
                                  "unknown-dtype", "uint32", "negative-shape", "bool-shape", "float-offsets",
                                  "reversed-offsets", "entry-not-object", "metadata-not-strings",
                                  "too-many-dims"])
def test_invalid_headers_raise_checkpoint_error(tmp_path, case):
    header, data, expected = _header_case(case)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw_safetensors(header, data))
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*" + re.escape(expected)):
        corenn.load(path)


def test_duplicate_header_keys_are_refused(tmp_path):
    entry = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
    text = ('{"w":' + entry + ',"w":' + entry + "}").encode()
    path = tmp_path / "dup.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\x00" * 4)
    with pytest.raises(CheckpointError, match="duplicate key"):
        corenn.load(path)


def test_deeply_nested_header_json_is_an_error_not_a_crash(tmp_path):
    text = b"[" * 100_000 + b"]" * 100_000
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(text) + 6) + b'{"a":' + text + b"}")
    with time_limit(20), pytest.raises(CheckpointError):
        corenn.load(path)


HOSTILE_STRUCTURES = {
    "reduce-payload": {"__reduce__": ["os.system", ["touch {canary}"]]},
    "reduce-in-dict": {"dict": [["x", {"__reduce__": ["builtins.open", ["{canary}", "w"]]}]]},
    "class-tag": {"py/object": "os.system", "args": ["touch {canary}"]},
    "code-as-float": {"dict": [["lr", {"float": "__import__('os').system('touch {canary}')"}]]},
    "code-as-tag": {"eval": "open('{canary}', 'w')"},
    "unknown-tensor": {"dict": [["w", {"tensor": "{canary}", "id": 0}]]},
    "json-float": {"dict": [["lr", 0.1]]},
    "bad-key-type": {"dict": [[["not", "a", "key"], 1]]},
    "bad-pair": {"dict": [["a", 1, 2]]},
    "duplicate-key": {"dict": [["a", 1], ["a", 2]]},
    "list-payload-not-list": {"list": "os.system"},
    "two-tags": {"list": [], "tuple": []},
    "id-reused": {"list": [{"tensor": "w", "id": 0}, {"tensor": "v", "id": 0}]},
}


@pytest.mark.parametrize("case", sorted(HOSTILE_STRUCTURES))
def test_hostile_structures_raise_and_execute_nothing(tmp_path, case):
    canary = tmp_path / "canary"
    structure = json.loads(json.dumps(HOSTILE_STRUCTURES[case]).replace("{canary}", str(canary)))
    arrays = {"w": np.ones(2, np.float32), "v": np.zeros(2, np.float32)}
    if case != "id-reused":
        arrays = {}
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(corenn_file(structure, arrays))
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ": corrupted structure"):
        corenn.load(path)
    assert not canary.exists()


def test_code_like_strings_are_just_strings(tmp_path):
    canary = tmp_path / "canary"
    code = f"__import__('os').system('touch {canary}')"
    obj = {"note": code, code: "as a key too", "nested": [code, {"eval": code}]}
    assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)
    assert not canary.exists()


def test_unreferenced_tensors_in_a_corenn_file_are_corruption(tmp_path):
    path = tmp_path / "c.safetensors"
    path.write_bytes(corenn_file({"dict": []}, {"stray": np.ones(1, np.float32)}))
    with pytest.raises(CheckpointError, match="not in its structure"):
        corenn.load(path)


@pytest.mark.parametrize("metadata, expected", [
    ({"corenn.format": "2"}, "newer corenn"),
    ({"corenn.format": "one"}, "corenn.format is 'one'"),
    ({"corenn.format": "1"}, "corenn.structure is missing"),
    ({"corenn.format": "1", "corenn.structure": '{"dict":[]}'}, "corenn.checksum is missing"),
    ({"corenn.structure": '{"dict":[]}', "corenn.checksum": "crc32:0"}, "corenn.format is None"),
    ({"corenn.format": "1", "corenn.structure": '{"dict":[]}', "corenn.checksum": "crc32:00000000"},
     "checksum mismatch"),
])
def test_bad_corenn_metadata(tmp_path, metadata, expected):
    path = tmp_path / "c.safetensors"
    safetensors.numpy.save_file({}, path, metadata=metadata)
    with pytest.raises(CheckpointError, match=re.escape(expected)):
        corenn.load(path)


def test_load_parses_the_header_once_with_its_bounded_reader(tmp_path, monkeypatch):
    # Neither json.loads nor the safetensors library's readers run on load: the header is read
    # once, by the reader that checks it (it used to be parsed by json, then by the library).
    obj = {"model": collections.OrderedDict([("w", corenn.tensor([[1.0, 2.0]]))]), "step": 3, "big": 10**30}
    path = tmp_path / "c.safetensors"
    corenn.save(obj, path)

    def forbidden(*args, **kwargs):
        raise AssertionError("a second parse of the header")

    monkeypatch.setattr(serialization.json, "loads", forbidden)
    monkeypatch.setattr(safetensors.numpy, "load", forbidden)
    monkeypatch.setattr(safetensors, "deserialize", forbidden)
    monkeypatch.setattr(safetensors, "safe_open", forbidden)
    loaded = corenn.load(path)
    monkeypatch.undo()
    assert_same(loaded, obj)


# --------------------------------------------------------------------------- property-based


FUZZ_SOURCE = {
    "model": collections.OrderedDict([
        ("fc.weight", corenn.from_numpy(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))),
        ("fc.bias", corenn.from_numpy(np.array([0.5, -0.5, 0.25], np.float32))),
        ("mask", corenn.from_numpy(np.array([True, False, True]))),
        ("count", corenn.from_numpy(np.array(7, np.int64))),
    ]),
    "optimizer": optimizer_like_state(),
    "epoch": 4,
    "note": "fuzz",
}
FUZZ_FILE = checkpoint_bytes(FUZZ_SOURCE)


@st.composite
def mutations(draw):
    data = bytearray(FUZZ_FILE)
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite", "header-length",
                                 "digit", "whitespace"]))
    header_end = 8 + struct.unpack("<Q", FUZZ_FILE[:8])[0]
    if kind == "digit":
        # Same-length edits of numbers in the header: shapes, offsets, floats, the checksum.
        digits = [i for i in range(8, header_end) if chr(data[i]).isdigit()]
        data[draw(st.sampled_from(digits))] = ord(draw(st.sampled_from("0123456789")))
        return bytes(data)
    if kind == "whitespace":
        # JSON allows any whitespace in the header's padding: such files must still load.
        spaces = [i for i in range(8, header_end) if data[i] == ord(" ")]
        data[draw(st.sampled_from(spaces))] = ord(draw(st.sampled_from("\t\n\r")))
        return bytes(data)
    # Half of the positions land in the 8-byte length and the JSON header, where parsing happens.
    position = draw(st.one_of(st.integers(0, header_end - 1), st.integers(0, len(data) - 1)))
    if kind == "flip":
        data[position] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[position:]
    elif kind == "insert":
        data[position:position] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "delete":
        del data[position:position + draw(st.integers(1, 16))]
    elif kind == "overwrite":
        chunk = draw(st.binary(min_size=1, max_size=16))
        data[position:position + len(chunk)] = chunk
    else:
        data[:8] = struct.pack("<Q", draw(st.one_of(st.integers(0, 2**64 - 1),
                                                    st.integers(header_end - 16, header_end + 16).map(abs))))
    return bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_fuzz_mutated_files_load_the_same_data_or_raise_checkpoint_error(mutated):
    with time_limit(10):
        try:
            loaded = corenn.load(io.BytesIO(mutated))
        except CheckpointError:
            return
    assert_same(loaded, FUZZ_SOURCE)


def test_fuzz_source_file_itself_loads():
    assert_same(corenn.load(io.BytesIO(FUZZ_FILE)), FUZZ_SOURCE)


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(ALL_DTYPES))
    shape = draw(st.lists(st.integers(0, 3), max_size=3).map(tuple))
    numpy_dtype = corenn._dtype.to_numpy(dtype)
    raw = draw(st.binary(min_size=math.prod(shape) * numpy_dtype.itemsize,
                         max_size=math.prod(shape) * numpy_dtype.itemsize))
    array = np.frombuffer(raw, dtype=np.uint8).copy()
    if numpy_dtype == np.bool_:
        array = array % 2
    return corenn.from_numpy(array.view(numpy_dtype).reshape(shape))


leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                   st.text(max_size=8), tensors())
keys = st.one_of(st.text(max_size=6), st.integers(-5, 5))
objects = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(keys, children, max_size=4).map(collections.OrderedDict),
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects)
def test_any_supported_object_round_trips(obj):
    with time_limit(10):  # no hypothesis deadline (a loaded machine is slow), but a hang fails
        loaded = corenn.load(io.BytesIO(checkpoint_bytes(obj)))
    assert_same(loaded, obj)


# --------------------------------------------------------------------------- hostile objects and headers


@pytest.mark.parametrize("value", [10**5000, -(10**5000), 2**64, -(2**63) - 1, 2**64 - 1, -(2**63), 7**20000],
                         ids=["5001-digits", "minus-5001-digits", "2**64", "below-int64", "uint64-max", "int64-min",
                              "16900-digits"])
def test_ints_of_any_size_round_trip_as_values_and_keys(tmp_path, value):
    # Python refuses to turn ints of more than 4300 digits into decimal text, which JSON needs:
    # ints beyond 64 bits are stored in hex.
    obj = {"v": value, "l": [value, 1], value: "as a key", "t": {value: corenn.tensor([1.0])}}
    assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)


def test_big_ints_do_not_depend_on_the_int_str_digit_limit(tmp_path):
    if not hasattr(sys, "set_int_max_str_digits"):
        pytest.skip("Python without the int <-> str digit limit")
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest allowed
    try:
        obj = {"v": 10**700, 10**700: 1}
        assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)
    finally:
        sys.set_int_max_str_digits(previous)


def test_ints_that_older_files_hold_as_long_json_numbers_still_load(tmp_path):
    value = 10**4000  # corenn used to write any int as a JSON number
    structure = {"dict": [["v", value]]}
    path = tmp_path / "old.safetensors"
    path.write_bytes(corenn_file(structure, {}))
    assert corenn.load(path) == {"v": value}


def test_a_hostile_long_decimal_number_is_refused_at_once(tmp_path):
    # Decimal conversion is quadratic in the digits; Python's digit limit can be switched off.
    if not hasattr(sys, "set_int_max_str_digits"):
        pytest.skip("Python without the int <-> str digit limit")
    path = tmp_path / "long.safetensors"
    text = '{"list":[' + "7" * 2_000_000 + "]}"
    metadata = {"corenn.format": "1", "corenn.structure": text, "corenn.checksum": serialization._checksum(text, {})}
    path.write_bytes(safetensors.numpy.save({}, metadata=metadata))
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        with time_limit(10), pytest.raises(CheckpointError, match="a number of 2000000 characters"):
            corenn.load(path)
    finally:
        sys.set_int_max_str_digits(previous)


def test_deep_nesting_is_refused_naming_the_file_the_place_and_the_limit(tmp_path):
    deep = []
    for _ in range(20_000):
        deep = [deep]
    path = tmp_path / "deep.safetensors"
    with pytest.raises(ValueError) as info:
        corenn.save({"x": deep}, path)
    message = str(info.value)
    assert f"corenn.save to {path}" in message
    assert f"nested more than {serialization.MAX_DEPTH} deep" in message
    assert "obj['x'][0][0]" in message and "more levels" in message  # the place, shortened
    assert not path.exists()


def test_nesting_up_to_the_limit_round_trips(tmp_path):
    obj = "leaf"
    for i in range(serialization.MAX_DEPTH):
        obj = [obj] if i % 3 == 0 else (obj,) if i % 3 == 1 else {"k": obj}
    assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)
    with pytest.raises(ValueError, match="nested more than"):
        corenn.save([obj], tmp_path / "c.safetensors")


@pytest.mark.parametrize("depth", [serialization.MAX_DEPTH + 1, 20_000])
def test_a_structure_nested_deeper_than_the_limit_is_corruption(tmp_path, depth):
    path = tmp_path / "deep.safetensors"
    text = '{"list":[' * depth + "1" + "]}" * depth
    arrays = {}
    metadata = {"corenn.format": "1", "corenn.structure": text,
                "corenn.checksum": serialization._checksum(text, arrays)}
    path.write_bytes(safetensors.numpy.save(arrays, metadata=metadata))
    with time_limit(20), pytest.raises(CheckpointError, match=re.escape(str(path)) + ": corrupted structure at .*"
                                       f"nested more than {serialization.MAX_DEPTH} deep"):
        corenn.load(path)


def test_save_errors_name_the_file(tmp_path):
    path = tmp_path / "c.safetensors"
    with pytest.raises(TypeError, match=re.escape(f"corenn.save to {path}: cannot store")):
        corenn.save({"f": print}, path)
    with pytest.raises(TypeError, match=re.escape(f"corenn.save to {path}: cannot store dict key")):
        corenn.save({1.5: 1}, path)
    cycle = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match=re.escape(f"corenn.save to {path}: obj[0] contains itself")):
        corenn.save(cycle, path)
    with pytest.raises(TypeError, match=re.escape("corenn.save to <BytesIO>: cannot store")):
        corenn.save({"f": print}, io.BytesIO())


def test_a_header_too_big_to_load_is_refused_at_save(tmp_path, monkeypatch):
    # Long keys and strings live in the header; past the readers' limit the file could be
    # written but never loaded again, so save refuses it, naming the file.
    monkeypatch.setattr(serialization, "_MAX_HEADER_BYTES", 4096)
    path = tmp_path / "c.safetensors"
    corenn.save({"k" * 1000: corenn.ones(1)}, path)  # a 1000-byte key, twice in the header: fine
    with pytest.raises(ValueError, match=re.escape(f"corenn.save to {path}: the checkpoint's header would be")):
        corenn.save({"k" * 3000: corenn.ones(1)}, path)
    assert list(corenn.load(path)) == ["k" * 1000]  # the previous checkpoint is untouched


def test_odd_keys_round_trip_or_are_refused_by_name(tmp_path):
    obj = {"": 1, "k" * 100_000: 2, "\ud800": 3, "a.b": corenn.ones(1), "a": {"b": corenn.zeros(1)},
           -(2**63): 4, "__metadata__": corenn.ones(2)}
    assert_same(round_trip(obj, tmp_path / "c.safetensors"), obj)
    for key in (b"bytes", 1.0, None, True, frozenset(), corenn.ones(1)):
        with pytest.raises(TypeError, match="keys must be str or int"):
            corenn.save({key: 1}, tmp_path / "c.safetensors")


def _peak_load_bytes(path) -> int:
    """Peak memory allocated while loading ``path`` (which must fail), the file's bytes included."""
    import tracemalloc
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError):
            corenn.load(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _hostile_headers(junk: bytes) -> dict[str, bytes]:
    """Headers that hide ``junk`` (a long JSON value) in every place a header has."""
    structure = b'{"list":' + junk + b"}"
    escaped = json.dumps(structure.decode()).encode()
    checksum = serialization._checksum(structure.decode(), {}).encode()
    return {
        "top-level": junk,
        "entry": b'{"w":' + junk + b"}",
        "shape": b'{"w":{"dtype":"F32","shape":' + junk + b',"data_offsets":[0,0]}}',
        "unknown-key": b'{"w":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":' + junk + b"}}",
        "metadata": b'{"__metadata__":' + junk + b"}",
        "metadata-value": b'{"__metadata__":{"format":' + junk + b"}}",
        "structure": (b'{"__metadata__":{"corenn.format":"1","corenn.checksum":"' + checksum
                      + b'","corenn.structure":' + escaped + b"}}"),
    }


@pytest.mark.parametrize("junk, place", [
    (junk, place) for junk in ("lists", "objects", "numbers") for place in sorted(_hostile_headers(b"[]"))
    if (junk, place) != ("numbers", "structure")  # a list of numbers is a valid structure: it loads
])
def test_hostile_header_costs_no_more_memory_than_its_size(tmp_path, junk, place):
    # json.loads turned a 19 MB header of [[],[],...] into 546 MB of lists. The header reader
    # fails at the first token out of place, whatever follows it.
    count = 1_000_000
    unit = {"lists": b"[],", "objects": b'{"a":[]},', "numbers": b"1,"}[junk]
    value = b"[" + unit * count + unit.rstrip(b",") + b"]"
    header = _hostile_headers(value)[place]
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    peak = _peak_load_bytes(path)
    assert peak < 3 * len(header), f"{peak / len(header):.1f} x the header's size"
