"""corenn_numba.calibration: each override runs only where it was measured faster, and says so.

- forcing either choice (compiled kernel, core) gives the same results, for every override;
- ``measure``: the first call of a shape class runs the core while the kernel compiles in the
  background, the next one times both and keeps the faster, saved per machine;
- ``cached``: saved choices only, the core otherwise, nothing timed or compiled;
- the saved choices are not reused on another CPU, thread count, numba version or kernel source.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import corenn
import corenn.nn as nn
import corenn.nn.functional as F
from corenn.dispatch import kernels
from corenn.kernels import fell_back
from corenn_numba import calibration

import corenn_numba

# -- the same results whichever way the choice goes --------------------------------------------------------------


def _rng():
    return np.random.default_rng(7)


def _t(array, grad=True):
    return corenn.tensor(array, requires_grad=grad)


def _floats(*shape):
    return _rng().standard_normal(shape).astype(np.float32)


# op -> function returning (output of that op, the tensors whose gradients to compare)
WORKLOADS = {
    "linear": lambda: (lambda x, w, b: (F.linear(x, w, b), [x, w, b]))(
        _t(_floats(32, 64)), _t(_floats(64, 64)), _t(_floats(64))),
    "conv": lambda: (lambda x, w, b: (F.conv2d(x, w, b, padding=1), [x, w, b]))(
        _t(_floats(2, 16, 9, 9)), _t(_floats(8, 16, 3, 3)), _t(_floats(8))),
    "conv_transpose": lambda: (lambda x, w: (F.conv_transpose2d(x, w, stride=2), [x, w]))(
        _t(_floats(2, 4, 5, 5)), _t(_floats(4, 3, 3, 3))),
    "max_pool": lambda: (lambda x: (F.max_pool2d(x, 2), [x]))(_t(_floats(2, 3, 8, 8))),
    "max_pool_with_indices": lambda: (lambda x: (F.max_pool2d(x, 2, return_indices=True)[0], [x]))(
        _t(_floats(2, 3, 8, 8))),
    "avg_pool": lambda: (lambda x: (F.avg_pool2d(x, 3, stride=2, padding=1), [x]))(_t(_floats(2, 3, 9, 9))),
    "adaptive_avg_pool": lambda: (lambda x: (F.adaptive_avg_pool2d(x, 3), [x]))(_t(_floats(2, 3, 8, 8))),
    "softmax": lambda: (lambda x: (F.softmax(x, dim=-1), [x]))(_t(_floats(8, 10))),
    "relu": lambda: (lambda x: (F.relu(x), [x]))(_t(_floats(4, 3, 8, 8))),
    "log_softmax": lambda: (lambda x: (F.log_softmax(x, dim=-1), [x]))(_t(_floats(8, 10))),
    "cross_entropy": lambda: (lambda x: (F.cross_entropy(x, corenn.tensor([1, 0, 9, 3, 2, 2, 5, 7]),
                                                         label_smoothing=0.1), [x]))(_t(_floats(8, 10))),
    "batch_norm": lambda: (lambda x, w, b: (F.batch_norm(x, corenn.zeros(3), corenn.ones(3), w, b, training=True),
                                            [x, w, b]))(_t(_floats(4, 3, 5, 5)), _t(_floats(3)), _t(_floats(3))),
    "layer_norm": lambda: (lambda x, w, b: (F.layer_norm(x, (16,), w, b), [x, w, b]))(
        _t(_floats(4, 16)), _t(_floats(16)), _t(_floats(16))),
    "group_norm": lambda: (lambda x, w, b: (F.group_norm(x, 2, w, b), [x, w, b]))(
        _t(_floats(4, 6, 5)), _t(_floats(6)), _t(_floats(6))),
    "embedding": lambda: (lambda w: (F.embedding(corenn.tensor([[1, 3, 3], [0, 9, 1]]), w), [w]))(_t(_floats(10, 4))),
    "getitem": lambda: (lambda x: (x[corenn.tensor([0, 2, 2, 5])], [x]))(_t(_floats(6, 4))),
    "index_put": lambda: (lambda x, v: (x.index_put((corenn.tensor([0, 2, 2]),), v, accumulate=True), [x, v]))(
        _t(_floats(5, 3)), _t(_floats(3, 3))),
    "gather": lambda: (lambda x: (x.gather(1, corenn.tensor([[0, 0], [1, 2], [2, 2], [0, 1]])), [x]))(
        _t(_floats(4, 3))),
    "scatter": lambda: (lambda x, s: (x.scatter_add(1, corenn.tensor([[0, 0], [1, 2], [2, 2], [0, 1]]), s), [x, s]))(
        _t(_floats(4, 3)), _t(_floats(4, 2))),
    "index_select": lambda: (lambda x: (x.index_select(0, corenn.tensor([3, 0, 3])), [x]))(_t(_floats(4, 5))),
    "index_add": lambda: (lambda x, s: (x.index_add(0, corenn.tensor([3, 0, 3]), s, alpha=2.0), [x, s]))(
        _t(_floats(4, 5)), _t(_floats(3, 5))),
    "pad_axis": lambda: (lambda x: (F.pad(x, (2, 3, 1, 2), mode="reflect"), [x]))(_t(_floats(2, 3, 6, 7))),
}


def _run_workload(op):
    out, inputs = WORKLOADS[op]()
    upstream = corenn.tensor(_rng().standard_normal(tuple(out.shape)).astype(np.float32))
    node = out.grad_fn
    out.backward(upstream)
    return node, [out.detach().numpy()] + [t.grad.numpy() for t in inputs]


def _train_twice(optimizer_cls, **options):
    corenn.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = optimizer_cls(model.parameters(), **options)
    x, y = corenn.randn(32, 8), corenn.randint(0, 4, (32,))
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [p.detach().numpy() for p in model.parameters()]


def test_every_override_has_a_workload_here():
    overridden = {registration.op for registration in corenn_numba.corenn_register_kernels()}
    assert overridden - {"sgd_update", "adam_update"} == set(WORKLOADS)


@pytest.mark.parametrize("op", sorted(WORKLOADS))
def test_forcing_kernel_or_core_gives_the_same_results(op):
    with calibration.choosing("kernel"):
        kernel_node, kernel_results = _run_workload(op)
    with calibration.choosing("core"):
        core_node, core_results = _run_workload(op)
    assert not fell_back(kernel_node) and fell_back(core_node)  # each mode really ran its side
    for got, want in zip(kernel_results, core_results):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("optimizer_cls, options", [(corenn.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
                                                    (corenn.optim.Adam, {"lr": 0.01})])
def test_forcing_kernel_or_core_gives_the_same_fused_updates(optimizer_cls, options):
    with calibration.choosing("kernel"):
        kernel_params = _train_twice(optimizer_cls, **options)
    with calibration.choosing("core"):
        core_params = _train_twice(optimizer_cls, **options)
    for got, want in zip(kernel_params, core_params):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(ValueError, match=r"set_mode\(\): mode must be one of measure, cached, kernel, core"):
        calibration.set_mode("fastest")


# -- measuring ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """Mode ``measure`` with an empty choices folder; the suite's mode again afterwards."""
    monkeypatch.setenv(calibration.ENV_CACHE_DIR, str(tmp_path))
    previous = calibration.mode()
    calibration.forget()
    calibration.set_mode("measure")
    yield tmp_path
    calibration.wait_for_compiles(timeout=120)
    calibration.forget()
    calibration.set_mode(previous)


def _linear_inputs(rows=64, features=64, outputs=64):
    return _floats(rows, features), _floats(outputs, features), _floats(outputs)


def _fake_times(kernel_step, core_step, kernel_forward, core_forward):
    def time_both(kernel_cls, args, params):
        return {"kernel_forward_s": kernel_forward, "core_forward_s": core_forward, "kernel_step_s": kernel_step,
                "core_step_s": core_step, "repeats": 3, "backward": True}
    return time_both


def test_first_call_runs_the_core_while_the_kernel_compiles_then_the_faster_is_kept_and_saved(fresh):
    x, w, b = _t(_floats(40, 70)), _t(_floats(50, 70)), _t(_floats(50))  # a class no other test here uses
    first = F.linear(x, w, b)
    assert fell_back(first.grad_fn)  # the core ran: the compiled code was not waited for
    assert calibration.wait_for_compiles(timeout=120)
    second = F.linear(x, w, b)  # compiled now: both timed, the faster kept
    [(key, choice)] = [(key, c) for key, c in calibration.choices().items() if "'linear'" in key]
    assert fell_back(second.grad_fn) == (not choice.train)
    assert choice.why.startswith("measured: kernel/core")
    times = choice.times
    assert times["repeats"] >= calibration.MIN_REPEATS and times["backward"]
    assert choice.train == (times["kernel_step_s"] <= (1 - calibration.MARGIN) * times["core_step_s"])
    np.testing.assert_allclose(second.detach().numpy(), first.detach().numpy(), rtol=1e-5, atol=1e-5)
    saved = json.loads(calibration.cache_file().read_text())
    assert saved["machine"]["cpu_features"] == calibration.machine()["cpu_features"]
    assert saved["choices"][key]["train"] == choice.train
    assert calibration.cache_file().parent == fresh


def test_a_decided_class_is_not_timed_again_and_other_sizes_of_it_share_the_choice(fresh, monkeypatch):
    monkeypatch.setattr(calibration, "_time_both", _fake_times(0.9, 1.0, 0.99, 1.0))
    calibration.foreground = True
    try:
        handles = kernels.lookup("linear", "cpu").handles
        x, w, b = _linear_inputs()
        assert handles(x, w, b)  # training: the kernel is 10% faster
        with corenn.no_grad():
            assert not handles(x, w, b)  # inference: 1% is within the margin, so the core
        monkeypatch.setattr(calibration, "_time_both", None)  # would fail if called
        x2, w2, b2 = _linear_inputs(rows=40, features=50, outputs=60)  # 33-64 each: the same class
        assert handles(x2, w2, b2)
    finally:
        calibration.foreground = False


@pytest.mark.parametrize("kernel_step, expected", [(0.94, True), (0.96, False), (1.5, False)])
def test_the_kernel_must_beat_the_core_by_the_margin(fresh, monkeypatch, kernel_step, expected):
    monkeypatch.setattr(calibration, "_time_both", _fake_times(kernel_step, 1.0, kernel_step, 1.0))
    monkeypatch.setattr(calibration, "foreground", True)
    assert kernels.lookup("linear", "cpu").handles(*_linear_inputs()) is expected


def test_a_failure_while_timing_never_breaks_the_call(fresh, monkeypatch):
    def broken(kernel_cls, args, params):
        raise RuntimeError("timer exploded")
    monkeypatch.setattr(calibration, "_time_both", broken)
    monkeypatch.setattr(calibration, "foreground", True)
    x, w, b = _linear_inputs()
    out = F.linear(_t(x), _t(w), _t(b))
    assert fell_back(out.grad_fn)
    np.testing.assert_allclose(out.detach().numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
    [choice] = calibration.choices().values()
    assert "not timed (RuntimeError: timer exploded)" in choice.why and not choice.saved


def test_cached_mode_uses_saved_choices_and_the_core_for_the_rest(fresh, monkeypatch):
    monkeypatch.setattr(calibration, "_time_both", _fake_times(0.5, 1.0, 0.5, 1.0))
    monkeypatch.setattr(calibration, "foreground", True)
    handles = kernels.lookup("linear", "cpu").handles
    assert handles(*_linear_inputs())  # measured and saved: kernel
    calibration.forget()  # a new process: only the file remains
    calibration.set_mode("cached")
    monkeypatch.setattr(calibration, "_time_both", None)
    monkeypatch.setattr(calibration, "_compile_now", None)  # nothing compiles in mode cached
    assert handles(*_linear_inputs())  # from the file
    assert not handles(*_linear_inputs(rows=200, features=300, outputs=100))  # never measured: the core
    [unsaved] = [choice for choice in calibration.choices().values() if not choice.saved]
    assert unsaved.why == "no saved choice (mode 'cached'): the core"


@pytest.mark.parametrize("change", ["cpu", "numba_threads", "numba", "kernel_sources"])
def test_choices_are_not_reused_on_another_cpu_thread_count_numba_or_kernel(fresh, monkeypatch, change):
    monkeypatch.setattr(calibration, "_time_both", _fake_times(0.5, 1.0, 0.5, 1.0))
    monkeypatch.setattr(calibration, "foreground", True)
    handles = kernels.lookup("linear", "cpu").handles
    assert handles(*_linear_inputs())
    here = calibration.cache_file()
    other = json.loads(json.dumps(calibration.machine()))
    if change == "numba":
        other["versions"]["numba"] += ".post1"
    elif change == "kernel_sources":  # an edited kernel, same version number
        other["kernel_sources"] = "0" * 16
    elif change == "numba_threads":
        other["numba_threads"] += 1
    else:
        other["cpu"] = "Some Other CPU"
    monkeypatch.setattr(calibration, "_machine", other)
    calibration.forget()
    assert calibration.cache_file() != here and not calibration.cache_file().exists()
    calibration.set_mode("cached")
    assert not handles(*_linear_inputs())  # the other machine's choice is not used here
    # and a file whose name matches but whose machine does not (a hash collision) is not used either
    calibration.cache_file().write_text(here.read_text())
    calibration.forget()
    assert not handles(*_linear_inputs())


def test_show_prints_what_was_chosen_and_why(fresh, monkeypatch):
    monkeypatch.setattr(calibration, "_time_both", _fake_times(0.5, 1.0, 2.0, 1.0))
    monkeypatch.setattr(calibration, "foreground", True)
    kernels.lookup("linear", "cpu").handles(*_linear_inputs())
    shown = subprocess.run([sys.executable, "-m", "corenn_numba", "show"], capture_output=True, text=True,
                           env={**os.environ, calibration.ENV_CACHE_DIR: str(fresh)}, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "measured (training): linear kernel 1/core 0" in shown.stdout
    assert "training: kernel, inference: core; measured: kernel/core 0.50x (forward+backward)" in shown.stdout
    info = subprocess.run([sys.executable, "-m", "corenn", "info"], capture_output=True, text=True,
                          env={**os.environ, calibration.ENV_CACHE_DIR: str(fresh)}, timeout=120)
    assert "kernel choice: kernel (CORENN_NUMBA_CHOOSE)" in info.stdout  # the suite's mode, inherited
    assert "linear kernel 1/core 0" in info.stdout


def test_calibrate_runs_a_script_and_saves_its_choices(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import corenn, corenn.nn.functional as F, sys\n"
                      "x = corenn.randn(40, 70, requires_grad=True); w = corenn.randn(50, 70, requires_grad=True)\n"
                      "F.linear(x, w).sum().backward()\n"
                      "print('script ran with', sys.argv[1:])\n")
    env = {**os.environ, calibration.ENV_CACHE_DIR: str(tmp_path / "choices"),
           "NUMBA_CACHE_DIR": str(calibration.cache_dir() / "numba")}  # the compiled code this suite already has
    env.pop("CORENN_NUMBA_CHOOSE")
    ran = subprocess.run([sys.executable, "-m", "corenn_numba", "calibrate", str(script), "--", "--epochs", "1"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "script ran with ['--epochs', '1']" in ran.stdout
    assert "1 new shape classes measured" in ran.stdout
    [saved] = (tmp_path / "choices").glob("choices-*.json")
    assert "'linear'" in next(iter(json.loads(saved.read_text())["choices"]))


def test_the_mode_comes_from_the_environment(tmp_path):
    probe = ("from corenn_numba import calibration; print(calibration.mode())")
    for value, expected in (("cached", "cached"), ("", "measure")):
        env = {**os.environ, "CORENN_NUMBA_CHOOSE": value}
        ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
        assert ran.stdout.strip() == expected, ran.stderr
    bad = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CORENN_NUMBA_CHOOSE": "fast"})
    assert "CORENN_NUMBA_CHOOSE='fast': expected one of measure, cached, kernel, core" in bad.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_process_forked_after_compiling_started_uses_the_core_for_new_classes(fresh):
    x, w = _t(_floats(48, 80)), _t(_floats(40, 80))
    F.linear(x, w)  # starts the compile thread
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new class must not compile here (the parent's thread may hold numba's lock)
        try:
            out = F.linear(_t(_floats(100, 130)), _t(_floats(90, 130)))
            message = f"{fell_back(out.grad_fn)}|{[c.why for c in calibration.choices().values() if not c.saved]}"
        except BaseException as error:  # noqa: BLE001  reported to the parent, which fails the test
            message = repr(error)
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        reported = pipe.read()
    os.waitpid(pid, 0)
    assert reported == "True|['forked while compiling: the core in this process']"
