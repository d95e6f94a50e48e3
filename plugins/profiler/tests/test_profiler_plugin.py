"""The plugin as installed: registered through the entry point, idle (nothing attached) unless a profile records."""
from __future__ import annotations

import subprocess
import sys

import corenn
import corenn.nn as nn
from corenn.profiler import profile


def info_lines():
    return next(lines for record, lines in corenn.plugins.info_lines() if record.name == "profiler")


def test_the_plugin_is_installed_active_and_registers_no_permanent_observer():
    record = corenn.plugins.records["profiler"]
    assert record.status == "active", record.reason
    assert record.distribution == "corenn-profiler"
    assert record.op_observers == []  # observers come and go with profile(): nothing per op while idle
    assert record.import_paths == {"corenn.profiler": "corenn_profiler.profiler",
                                   "corenn.autograd.profiler": "corenn_profiler.autograd_profiler"}
    assert info_lines() == ["corenn-profiler 0.1.0: idle (no observer attached)"]


def test_a_profile_attaches_only_while_it_records():
    assert not corenn.dispatch.observers
    model = nn.Linear(2, 2)
    with profile(with_modules=True) as prof:
        assert len(corenn.dispatch.observers) == 1
        model(corenn.ones(1, 2))
        assert info_lines() == ["corenn-profiler 0.1.0: recording"]
    assert not corenn.dispatch.observers
    recorded = len(prof.trace.records)
    model(corenn.ones(1, 2)).sum().backward()  # after the profile: neither ops nor module calls are recorded
    assert len(prof.trace.records) == recorded


def test_import_corenn_does_not_import_the_profiler_machinery():
    code = ("import sys, corenn; assert 'corenn_profiler' in sys.modules; "
            "print(sorted(m for m in sys.modules if m.startswith('corenn_profiler')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['corenn_profiler']"


def test_a_long_profile_leaves_nothing_per_op_for_the_garbage_collector_to_walk():
    # Each ended record is a tuple of plain values, which CPython's collector stops tracking at its
    # first pass: a profile of many steps must not make every later collection walk all its records.
    import gc
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = corenn.randn(3, 4)
    with profile(record_shapes=True, profile_memory=True, with_modules=True, with_stack=True) as prof:
        for _ in range(20):
            model(x).sum().backward()
    records = prof.trace.records
    assert len(records) > 200
    for _ in range(3):  # a tuple is untracked once what it holds is: one pass per level of nesting
        gc.collect()
    tracked = [r for r in records if gc.is_tracked(r)]
    assert not tracked, tracked[:3]
    events = prof.events()
    linear = next(e for e in events if e.name == "linear")
    assert linear.input_shapes == [[3, 4], [8, 4], [8]]  # PyTorch's lists of lists, from the frozen tuples
    assert sum(e.freed_bytes for e in events) > 0  # frees, kept aside while recording, were merged in


def test_recording_moves_what_existed_out_of_the_collectors_way_and_gives_it_back():
    import gc
    before = gc.get_freeze_count()
    with profile():
        assert gc.get_freeze_count() > before  # the program's objects, frozen while recording
        corenn.ones(2) + 1
    assert gc.get_freeze_count() == before
    gc.freeze()  # a program that froze objects itself: the profile leaves its freeze alone
    try:
        frozen = gc.get_freeze_count()
        with profile():
            corenn.ones(2) + 1
        # neither frozen again nor unfrozen (frozen objects that die meanwhile leave the count, hence <=)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
