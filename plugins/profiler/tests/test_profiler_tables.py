"""The printed tables, read back: key_averages().table() in PyTorch's layout, module_summary(), memory_summary()."""
from __future__ import annotations

import re

import pytest

import corenn
import corenn.nn as nn
from corenn.profiler import profile, record_function

TIME = re.compile(r"^\d+\.\d{3}(us|ms|s)$")
MEMORY = re.compile(r"^(\d+ B|\d+\.\d{2} (KiB|MiB|GiB))$")


def parse_time(text: str) -> float:
    value, unit = re.match(r"^([\d.]+)(us|ms|s)$", text).groups()
    return float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def parse_memory(text: str) -> int:
    value, unit = text.split(" ")
    return round(float(value) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[unit])


def read_table(text: str):
    """(headers, rows as lists of cells, footer) from a table printed with two-space column gaps."""
    lines = text.rstrip("\n").split("\n")
    separators = [i for i, line in enumerate(lines) if line.startswith("---")]
    widths = [len(dashes) for dashes in lines[separators[0]].split("  ") if dashes]

    def cells(line):
        out, position = [], 0
        for width in widths:
            out.append(line[position:position + width].strip())
            position += width + 2
        return out
    headers = cells(lines[separators[0] + 1])
    rows = [cells(line) for line in lines[separators[1] + 1:separators[2]]]
    return headers, rows, lines[separators[2] + 1:]


def test_the_table_has_pytorchs_columns_and_its_numbers_are_the_events(net, batch):
    with profile() as prof:
        net(batch).sum().backward()
    averages = prof.key_averages()
    text = averages.table(sort_by="self_cpu_time_total", row_limit=5)
    headers, rows, footer = read_table(text)
    assert headers == ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
    assert len(rows) == 5
    by_key = {a.key: a for a in averages}
    self_times = [parse_time(row[2]) for row in rows]
    assert self_times == sorted(self_times, reverse=True)
    total = parse_time(footer[0].split(": ")[1])
    assert footer[0].startswith("Self CPU time total: ")
    assert total == pytest.approx(sum(a.self_cpu_time_total for a in averages), rel=1e-3)
    for name, self_percent, self_cpu, total_percent, cpu_total, average, calls in rows:
        event = by_key[name]
        assert int(calls) == event.count
        assert all(TIME.match(cell) for cell in (self_cpu, cpu_total, average))
        assert parse_time(self_cpu) == pytest.approx(event.self_cpu_time_total, rel=1e-3)
        assert parse_time(average) == pytest.approx(event.cpu_time_total / event.count, rel=1e-3)
        assert float(self_percent.rstrip("%")) == pytest.approx(100 * event.self_cpu_time_total / total, abs=0.01)
    all_rows = read_table(averages.table(row_limit=-1))[1]
    assert len(all_rows) == len(averages)


def test_the_layout_is_pytorchs_for_the_same_options():
    torch = pytest.importorskip("torch")
    from torch.profiler import profile as torch_profile

    def header_of(text):
        return read_table(text)[0]
    with torch_profile(record_shapes=True, profile_memory=True) as theirs:
        (torch.ones(4, 4, requires_grad=True) * 2).sum().backward()
    with profile(record_shapes=True, profile_memory=True) as ours:
        (corenn.ones(4, 4, requires_grad=True) * 2).sum().backward()
    for options in (dict(), dict(group_by_input_shape=True)):
        assert header_of(ours.key_averages(**options).table()) == header_of(theirs.key_averages(**options).table())


def test_memory_and_shape_columns_use_named_units(net, batch):
    with profile(record_shapes=True, profile_memory=True) as prof:
        net(batch).sum().backward()
    headers, rows, _ = read_table(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_memory_usage"))
    assert headers[6:] == ["CPU Mem", "Self CPU Mem", "# of Calls", "Input Shapes"]
    memory = [parse_memory(row[6]) for row in rows]
    assert memory == sorted(memory, reverse=True) and memory[0] > 0
    for row in rows:
        assert MEMORY.match(row[6]) and MEMORY.match(row[7]), row
        assert row[9].startswith("[")
    relu_rows = [row for row in rows if row[0] == "relu"]
    assert {row[9] for row in relu_rows} == {"[[3, 4, 8, 8]]", "[[3, 8, 4, 4]]", "[[3, 16]]"}
    # A relu on (3, 4, 8, 8) float32 allocates its output: 768 floats.
    (first,) = [row for row in relu_rows if row[9] == "[[3, 4, 8, 8]]"]
    assert parse_memory(first[7]) == 3 * 4 * 8 * 8 * 4


def test_source_location_column_lists_the_frames():
    def inner(t):
        return t.exp()

    with profile(with_stack=True) as prof:
        inner(corenn.ones(2))
    text = prof.key_averages(group_by_stack_n=2).table(max_src_column_width=300)
    headers, rows, _ = read_table(text)
    assert headers[-1] == "Source Location"
    first = rows.index(next(row for row in rows if row[0] == "exp"))
    assert rows[first][-1].endswith(": inner")
    assert rows[first + 1][0] == "" and rows[first + 1][-1].endswith(": test_source_location_column_lists_the_frames")


def test_long_names_are_cut_as_pytorch_does():
    with profile() as prof:
        with record_function("x" * 80):
            pass
    headers, rows, _ = read_table(prof.key_averages().table())
    assert rows[0][0] == "x" * 52 + "..."


def test_module_summary_prints_the_module_tree_with_its_numbers(net, batch):
    with profile(with_modules=True) as prof:
        net(batch).sum().backward()
    summary = prof.module_summary()
    print(summary)
    headers, rows, footer = read_table(summary)
    assert headers == ["Module", "Type", "Calls", "Forward", "Backward", "Parameters", "Activations"]
    tree = [row[0] for row in rows]
    assert tree == ["Net", "├─ features", "│  ├─ 0", "│  │  ├─ conv", "│  │  └─ pool", "│  └─ 1", "│     ├─ conv",
                    "│     └─ pool", "├─ head", "│  ├─ 0", "│  └─ 1", "└─ out"]
    types = [row[1] for row in rows]
    assert types == ["Net", "Sequential", "Block", "Conv2d", "MaxPool2d", "Block", "Conv2d", "MaxPool2d",
                     "Sequential", "Linear", "ReLU", "Linear"]
    calls = {stats.path: stats.calls for stats in summary.rows}
    assert calls["Net.out"] == 2 and calls["Net"] == 1 and calls["Net.features.0.conv"] == 1
    assert [int(row[2]) for row in rows] == [s.calls for s in summary.rows]
    # Parameter bytes are the modules' own float32 parameters, children included.
    for row, stats in zip(rows, summary.rows):
        module = net.get_submodule(stats.path.partition(".")[2]) if "." in stats.path else net
        assert stats.parameter_bytes == sum(p.numel() * 4 for p in module.parameters())
        assert parse_memory(row[5]) == pytest.approx(stats.parameter_bytes, rel=0.01)
        assert TIME.match(row[3]) and TIME.match(row[4])
    by_path = {s.path: s for s in summary.rows}
    # Activations: the bytes a call returns (Net.out returns (3, 16) float32 each time).
    assert by_path["Net.out"].activation_bytes == 3 * 16 * 4
    assert by_path["Net.features.0"].activation_bytes == 3 * 4 * 4 * 4 * 4
    # A parent's forward time holds its children's; backward time is charged to modules with ops.
    for stats in summary.rows:
        assert stats.forward_time >= sum(child.forward_time for child in stats.children) - 1e-3
        assert stats.backward_time >= sum(child.backward_time for child in stats.children) - 1e-3
    assert all(by_path[p].backward_time > 0 for p in ("Net.features.0.conv", "Net.head.0", "Net.out"))
    backward_total = sum(e.cpu_time_total for e in prof.events() if e.kind == "backward" and e.module)
    assert by_path["Net"].backward_time == pytest.approx(backward_total, rel=1e-6)
    assert footer[0].startswith("Forward total: ")


def test_module_summary_with_memory_adds_allocation_columns_that_add_up(net, batch):
    with profile(with_modules=True, profile_memory=True) as prof:
        net(batch).sum().backward()
    summary = prof.module_summary()
    headers, rows, _ = read_table(summary)
    assert headers[-2:] == ["Fwd Alloc", "Bwd Alloc"]
    by_path = {s.path: s for s in summary.rows}
    ops = [e for e in prof.events() if e.kind == "op"]
    assert by_path["Net"].allocated_bytes == sum(e.allocated_bytes for e in ops if e.module.startswith("Net"))
    block = by_path["Net.features.0"]
    assert block.allocated_bytes == sum(child.allocated_bytes for child in block.children) + sum(
        e.allocated_bytes for e in ops if e.module == "Net.features.0")  # its own relu
    for row, stats in zip(rows, summary.rows):
        assert parse_memory(row[7]) == pytest.approx(stats.allocated_bytes, rel=0.01)


def test_modules_called_outside_their_parent_and_reused_keep_one_row():
    shared = nn.Linear(2, 2)
    with profile(with_modules=True) as prof:
        for _ in range(3):
            shared(corenn.ones(1, 2))
    (row,) = prof.module_summary().rows
    assert (row.path, row.type_name, row.calls) == ("Linear", "Linear", 3)
