"""Events of a model of known structure: op names, counts, shapes, backward attribution, nesting, self times."""
from __future__ import annotations

import warnings

import pytest

import corenn
import corenn.nn as nn
from corenn.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule

from conftest import Net


def profiled(model, x, **options):
    with profile(**options) as prof:
        model(x).sum().backward()
    return prof


def forward_ops(prof):
    return [e for e in prof.events() if e.kind == "op"]


def test_the_known_model_gives_its_ops_in_order_with_counts_and_shapes(net, batch):
    prof = profiled(net, batch, record_shapes=True)
    ops = forward_ops(prof)
    # Two blocks of conv, relu, max_pool; flatten; head linear + relu; `out` twice; the loss's sum.
    assert [e.name for e in ops] == ["conv", "relu", "max_pool"] * 2 + ["reshape", "linear", "relu", "linear",
                                                                        "linear", "sum"]
    counts = {a.key: a.count for a in prof.key_averages()}
    assert counts["conv"] == 2 and counts["linear"] == 3 and counts["relu"] == 3 and counts["max_pool"] == 2
    # Input shapes follow from the model: batch 3, 1 -> 4 -> 8 channels, 8x8 -> 4x4 -> 2x2.
    conv1, conv2 = [e for e in ops if e.name == "conv"]
    assert conv1.input_shapes == [[3, 1, 8, 8], [4, 1, 3, 3], [4]]
    assert conv2.input_shapes == [[3, 4, 4, 4], [8, 4, 3, 3], [8]]
    head, out1, out2 = [e for e in ops if e.name == "linear"]
    assert head.input_shapes == [[3, 32], [16, 32], [16]]
    assert out1.input_shapes == out2.input_shapes == [[3, 16], [16, 16], [16]]
    by_shape = prof.key_averages(group_by_input_shape=True)
    linear_rows = sorted((a.input_shapes, a.count) for a in by_shape if a.key == "linear")
    assert linear_rows == [("[[3, 16], [16, 16], [16]]", 2), ("[[3, 32], [16, 32], [16]]", 1)]


def test_repeated_shapes_are_kept_once_while_recording():
    from corenn_profiler._recorder import KIND, NAME, OP, SHAPES
    x = corenn.ones(4, 3)
    with profile(record_shapes=True) as prof:
        for _ in range(5):
            x * 2
        x * corenn.ones(3)
    records = [r for r in prof.trace.records if r[KIND] == OP and r[NAME] == "mul"]
    assert [r[SHAPES] for r in records] == [((4, 3), ())] * 5 + [((4, 3), (3,))]
    assert len({id(r[SHAPES]) for r in records[:5]}) == 1  # one tuple for the five same-shaped calls
    assert [e.input_shapes for e in prof.events()][-1] == [[4, 3], [3]]


def test_without_record_shapes_no_shapes_are_kept(net, batch):
    prof = profiled(net, batch)
    assert all(e.input_shapes == [] for e in prof.events())


def test_each_backward_call_is_attributed_to_the_forward_op_that_recorded_its_node(net, batch):
    prof = profiled(net, batch, with_modules=True)
    events = prof.events()
    forward = {e.sequence_nr: e for e in events if e.kind == "op" and e.sequence_nr > 0}
    backward = [e for e in events if e.kind == "backward"]
    # Every recorded forward op got exactly one backward call, in reverse order of creation.
    assert sorted(e.sequence_nr for e in backward) == sorted(forward)
    assert [e.sequence_nr for e in backward] == sorted(forward, reverse=True)
    expected_names = {"conv": "ConvolutionBackward0", "relu": "ReluBackward0", "max_pool": "MaxPool2DWithIndicesBackward0",
                      "linear": "AddmmBackward0", "reshape": "ViewBackward0", "sum": "SumBackward0"}
    for event in backward:
        op = forward[event.sequence_nr]
        assert event.forward_op == op.name
        assert event.name == expected_names[op.name]
        assert event.module == op.module  # backward is charged to the forward op's module
        assert event.time_range.start > op.time_range.end


def test_self_time_sums_to_total_time(net, batch):
    with profile(record_shapes=True) as prof:
        with record_function("step"):
            with record_function("forward"):
                loss = net(batch).sum()
            with record_function("backward"):
                loss.backward()
    events = prof.events()
    for event in events:
        assert event.self_cpu_time_total >= -1e-6
        assert event.cpu_time_total >= sum(c.cpu_time_total for c in event.cpu_children) - 1e-6
    top_level = [e for e in events if e.cpu_parent is None]
    assert [e.name for e in top_level] == ["step"]
    total_self = sum(e.self_cpu_time_total for e in events)
    assert total_self == pytest.approx(top_level[0].cpu_time_total, rel=1e-9, abs=1e-6)
    averages = prof.key_averages()
    assert sum(a.self_cpu_time_total for a in averages) == pytest.approx(total_self, rel=1e-9)
    step = next(a for a in averages if a.key == "step")
    assert step.cpu_time_total == pytest.approx(total_self)


def test_record_function_nesting_is_preserved_and_it_works_as_a_decorator():
    @record_function("decorated")
    def work(t):
        return t * 2

    x = corenn.ones(4)
    with profile() as prof:
        with record_function("outer"):
            with record_function("inner"):
                y = x + 1
            work(y)
        z = x - 1  # outside every range
    events = {e.name: e for e in prof.events()}
    outer, inner, decorated = events["outer"], events["inner"], events["decorated"]
    assert outer.cpu_parent is None and outer.kind == "user_annotation"
    assert inner.cpu_parent is outer and decorated.cpu_parent is outer
    assert events["add"].cpu_parent is inner and events["mul"].cpu_parent is decorated
    assert events["sub"].cpu_parent is None
    assert [c.name for c in outer.cpu_children] == ["inner", "decorated"]
    assert outer.time_range.start <= inner.time_range.start <= inner.time_range.end <= decorated.time_range.start
    assert decorated.time_range.end <= outer.time_range.end
    assert z.tolist() == [0.0] * 4 and work(x).tolist() == [2.0] * 4  # no profile: still works


def test_record_function_without_a_profile_does_nothing_and_checks_its_name():
    with record_function("nobody listens"):
        corenn.ones(2) + 1
    with pytest.raises(TypeError, match=r"record_function\(\): argument 'name' must be str"):
        record_function(3)


def test_schedule_matches_pytorch():
    torch_profiler = pytest.importorskip("torch.profiler")
    for arguments in [dict(wait=1, warmup=1, active=2), dict(wait=1, warmup=1, active=2, repeat=2),
                      dict(wait=0, warmup=0, active=1, repeat=3, skip_first=2), dict(wait=2, warmup=1, active=3,
                                                                                     repeat=1, skip_first=1)]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch warns about warmup=0
            ours, theirs = schedule(**arguments), torch_profiler.schedule(**arguments)
            assert [ours(s).name for s in range(20)] == [theirs(s).name for s in range(20)], arguments


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"schedule\(\): argument 'wait' must be a non-negative int"):
        schedule(wait=-1, warmup=0, active=1)
    with pytest.raises(ValueError, match=r"schedule\(\): argument 'active' must be at least 1"):
        schedule(wait=0, warmup=0, active=0)


def test_a_schedule_records_only_active_steps_and_hands_each_cycle_to_on_trace_ready():
    ready = []

    def on_ready(prof):
        steps = [e.name for e in prof.events() if e.kind == "step"]
        adds = sum(1 for e in prof.events() if e.name == "add")
        ready.append((prof.step_num, steps, adds))

    x = corenn.ones(2)
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=on_ready) as prof:
        for _ in range(10):
            x = x + 1
            prof.step()
    # Cycle = 4 steps: 0 wait, 1 warm-up, 2-3 recorded; then 4 wait, 5 warm-up, 6-7 recorded; then nothing.
    assert ready == [(4, ["ProfilerStep#2", "ProfilerStep#3"], 2), (8, ["ProfilerStep#6", "ProfilerStep#7"], 2)]
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["ProfilerStep*"].count == 2
    assert not corenn.dispatch.observers


def test_profile_step_without_schedule_records_everything_and_calls_on_trace_ready_once():
    ready = []
    with profile(on_trace_ready=ready.append) as prof:
        for _ in range(3):
            corenn.ones(2).exp()
            prof.step()
    assert ready == [prof]
    assert sum(1 for e in prof.events() if e.name == "exp") == 3
    assert not [e for e in prof.events() if e.kind == "step"]  # as PyTorch: step ranges only with a schedule


def test_cuda_activity_without_a_gpu_warns_and_is_dropped_as_in_pytorch():
    if corenn.cuda.is_available():
        pytest.skip("a CUDA device is available")
    with pytest.warns(UserWarning, match="CUDA is not available, disabling CUDA profiling"):
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    assert prof.activities == {ProfilerActivity.CPU}
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="no activities left"):
        profile(activities=[ProfilerActivity.CUDA])
    from corenn.profiler import supported_activities
    assert supported_activities() == {ProfilerActivity.CPU}


def test_bad_arguments_and_states_are_named():
    with pytest.raises(TypeError, match=r"profile\(\): argument 'activities'"):
        profile(activities=["cpu"])
    with pytest.raises(ValueError, match="with_flops"):
        profile(with_flops=True)
    with pytest.raises(ValueError, match=r"profile\(\): argument 'max_trace_events'"):
        profile(max_trace_events=0)
    prof = profile()
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        prof.key_averages()
    with pytest.raises(RuntimeError, match=r"profile.step\(\): the profile is not started"):
        prof.step()
    with profile():
        with pytest.raises(RuntimeError, match="Profiler is already enabled"):
            with profile():
                pass
    with profile() as prof:
        corenn.ones(1) + 1
    with pytest.raises(RuntimeError, match=r"module_summary\(\): .*with_modules=True"):
        prof.module_summary()
    with pytest.raises(RuntimeError, match=r"memory_stats\(\): .*profile_memory=True"):
        prof.memory_stats()
    with pytest.raises(ValueError, match=r"table\(\): argument 'sort_by'"):
        prof.key_averages().table(sort_by="wall_time")


def test_an_exception_inside_the_profile_detaches_the_recorder():
    with pytest.raises(ZeroDivisionError):
        with profile(with_modules=True) as prof:
            nn.Linear(2, 2)(corenn.ones(1, 2))
            1 / 0
    assert not corenn.dispatch.observers
    assert [e.name for e in prof.events()] == ["linear"]
    with profile() as again:  # a new profile can start
        corenn.ones(1) + 1
    assert [e.name for e in again.events()] == ["add"]


def test_with_stack_records_the_calling_python_frame():
    def user_function(t):
        return t.exp()

    with profile(with_stack=True) as prof:
        user_function(corenn.ones(2))
    (event,) = [e for e in prof.events() if e.name == "exp"]
    assert event.stack[0].startswith(__file__) and event.stack[0].endswith(": user_function")
    assert event.stack[1].endswith(": test_with_stack_records_the_calling_python_frame")
    line = int(event.stack[0].split("(")[1].split(")")[0])
    assert open(__file__).read().splitlines()[line - 1].strip() == "return t.exp()"
    averages = prof.key_averages(group_by_stack_n=1)
    assert any(a.key == "exp" and a.stack == event.stack[:1] for a in averages)


def test_ops_of_other_threads_are_recorded_on_their_own_thread():
    import threading

    def worker():
        with record_function("in thread"):
            corenn.ones(2) * 2

    with profile() as prof:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        corenn.ones(2) + 1
    events = {e.name: e for e in prof.events()}
    assert events["mul"].cpu_parent is events["in thread"]
    assert events["mul"].thread != events["add"].thread


def test_the_legacy_autograd_profiler_spelling():
    import corenn.autograd.profiler as legacy

    with legacy.profile(record_shapes=True) as prof:
        corenn.ones(2, 3).sum(0)
    assert [e.name for e in prof.function_events] == ["sum"]
    assert "sum" in prof.table()
    with legacy.profile(enabled=False) as off:
        corenn.ones(2) + 1
    assert off.trace is None
    assert legacy.record_function is record_function


def test_actions_are_pytorchs():
    assert [a.name for a in ProfilerAction] == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE"]
    assert ProfilerActivity.CPU.name == "CPU" and ProfilerActivity.CUDA.name == "CUDA"


def test_import_paths_reach_the_plugin():
    import corenn.profiler
    import corenn_profiler
    from corenn_profiler import profiler

    assert corenn.profiler is profiler
    assert corenn_profiler.profile is profiler.profile
    assert set(profiler.__all__) >= {"profile", "schedule", "record_function", "ProfilerActivity",
                                     "ProfilerAction", "tensorboard_trace_handler", "supported_activities"}
