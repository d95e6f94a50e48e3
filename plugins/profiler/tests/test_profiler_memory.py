"""profile_memory: bytes per op and per module, peak, allocation sites; never negative, and they add up."""
from __future__ import annotations

import corenn
import corenn.nn as nn
from corenn.profiler import profile


def test_every_number_is_non_negative_and_allocated_minus_freed_is_live(net, batch):
    with profile(profile_memory=True, with_modules=True) as prof:
        loss = net(batch).sum()
        loss.backward()
    events = prof.events()
    for event in events:
        assert event.allocated_bytes >= 0 and event.freed_bytes >= 0
        assert event.freed_bytes <= event.allocated_bytes
        assert event.cpu_memory_usage >= event.self_cpu_memory_usage >= 0
    for average in prof.key_averages():
        assert average.cpu_memory_usage >= 0 and average.self_cpu_memory_usage >= 0
    stats = prof.memory_stats()
    assert stats["allocated"] == sum(e.allocated_bytes for e in events)
    assert stats["freed"] == sum(e.freed_bytes for e in events)
    assert stats["live"] == stats["allocated"] - stats["freed"] >= 0
    assert stats["live"] <= stats["peak"] <= stats["allocated"]
    assert stats["peak_op"] in {e.name for e in events}
    sites = prof.memory_summary().sites
    assert sum(site["allocated"] for site in sites) == stats["allocated"]
    assert all(site["allocated"] >= site["freed"] >= 0 for site in sites)


def test_known_allocations_views_and_in_place_ops():
    x = corenn.ones(100, 10)  # made before the profile: not counted
    with profile(profile_memory=True) as prof:
        y = x * 2              # a new 100x10 float32 array
        view = y.t()           # a view: no new memory
        y.add_(1)              # in place: no new memory
        z = y.sum(0)           # 10 floats
        del y, view            # y's memory is freed inside the profile
    events = {e.name: e for e in prof.events()}
    assert events["mul"].allocated_bytes == 100 * 10 * 4
    assert events["mul"].freed_bytes == 100 * 10 * 4
    others = [e for e in prof.events() if e.name not in ("mul", "sum")]
    assert others and all(e.allocated_bytes == 0 for e in others), [(e.name, e.allocated_bytes) for e in others]
    assert events["sum"].allocated_bytes == 10 * 4 and events["sum"].freed_bytes == 0
    stats = prof.memory_stats()
    assert stats["live"] == 10 * 4  # z is still alive
    assert stats["peak"] == 100 * 10 * 4 + 10 * 4
    assert z.shape == (10,)


def test_backward_gradients_are_counted_and_passed_through_gradients_are_not():
    w = corenn.ones(50, requires_grad=True)
    with profile(profile_memory=True) as prof:
        ((w * 3) + 1).sum().backward()
    backward = {e.name: e for e in prof.events() if e.kind == "backward"}
    # AddBackward0 hands its incoming gradient on: nothing new. MulBackward0 computes grad * 3: 50 floats.
    assert backward["AddBackward0"].allocated_bytes == 0
    assert backward["MulBackward0"].allocated_bytes == 50 * 4


def test_memory_per_module_adds_up_to_the_root(net, batch):
    with profile(profile_memory=True, with_modules=True) as prof:
        net(batch)
    rows = prof.module_summary().rows
    root = rows[0]
    ops = [e for e in prof.events() if e.kind == "op"]
    assert root.allocated_bytes == sum(e.allocated_bytes for e in ops)
    linear = next(r for r in rows if r.path == "Net.head.0")
    assert linear.allocated_bytes == 3 * 16 * 4  # its output


def test_top_allocation_sites_name_the_frame_with_with_stack():
    def make_big():
        return corenn.ones(1000) * 2

    def make_small():
        return corenn.ones(10) * 2

    with profile(profile_memory=True, with_stack=True) as prof:
        keep = [make_big(), make_small(), make_big()]
    summary = prof.memory_summary(top=5)
    top = summary.sites[0]
    assert top["site"].endswith(": make_big") and top["op"] == "mul"
    assert top["allocated"] == 2 * 1000 * 4 and top["calls"] == 2
    assert "Peak memory: " in summary and "Top allocation sites" in summary
    lines = summary.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("Site "))
    assert "make_big" in lines[header + 2] and "make_small" in lines[header + 3]  # the rows, most first
    assert lines[header + 2].split()[-6:] == ["mul", "7.81", "KiB", "0", "B", "2"]  # allocated, freed (kept), calls
    assert len(keep) == 3


def test_memory_summary_text_states_units_and_numbers():
    with profile(profile_memory=True) as prof:
        a = corenn.ones(256, 1024) * 1  # exactly 1 MiB
    text = prof.memory_summary()
    first, second = text.split("\n")[:2]
    assert first.startswith("Peak memory: 1.00 MiB")
    assert second == "Allocated: 1.00 MiB  Freed: 0 B  Live at end: 1.00 MiB"
    assert a.numel() == 256 * 1024


def test_frees_after_the_profile_are_not_counted():
    with profile(profile_memory=True) as prof:
        a = corenn.ones(10) * 2
    del a
    (event,) = [e for e in prof.events() if e.name == "mul"]
    assert event.freed_bytes == 0 and prof.memory_stats()["live"] == 40


def test_module_activation_bytes_with_a_tuple_output():
    class Split(nn.Module):
        def forward(self, x):
            return x[:, :2] * 1, x[:, 2:] * 1

    with profile(with_modules=True) as prof:
        Split()(corenn.ones(3, 5))
    (row,) = prof.module_summary().rows
    assert row.activation_bytes == 3 * 5 * 4


def test_the_timeline_and_peak_follow_each_free_between_ops():
    # Frees are counted when the profile stops, from the marks each op left: every point must be what
    # counting each free as it happened gives. (corenn.ones is a factory, not a recorded op.)
    with profile(profile_memory=True) as prof:
        a = corenn.ones(100) * 1     # 400 B live
        b = a * 2                    # 800 B: the peak
        del a                        # 400 B, seen at the next op's start
        c = b + 1                    # 800 B again
        del b, c                     # 0 B at the next op's start
        d = corenn.ones(10) * 3      # 40 B
    samples = prof.trace.memory_samples
    assert [live for _, live in samples] == [400, 800, 400, 800, 0, 40]
    assert [time for time, _ in samples] == sorted(time for time, _ in samples)
    stats = prof.memory_stats()
    assert stats["peak"] == 800 and stats["peak_op"] == "mul" and stats["live"] == 40
    assert stats["peak_time_us"] == prof.trace.us(samples[1][0])
    assert d.shape == (10,)
