"""Exports: the Chrome trace (valid trace-event JSON, ranges nest, bounded size), folded stacks, TensorBoard
handler, the picture and ``python -m corenn_profiler``."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

import corenn
from corenn.profiler import profile, record_function, schedule, tensorboard_trace_handler

# The fields the trace-event format requires, per phase (Trace Event Format, Google, "Event Descriptions").
REQUIRED = {"X": {"name", "cat", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "tid", "args"},
            "C": {"name", "ph", "ts", "pid", "args"}, "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
            "f": {"name", "cat", "ph", "id", "ts", "pid", "tid"}}


def validate_trace(trace: dict) -> list[dict]:
    """Check the format; return the complete ('X') events. Ranges on one thread must nest or be disjoint."""
    assert isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in (None, "ms", "ns")
    complete = []
    for event in trace["traceEvents"]:
        phase = event["ph"]
        assert phase in REQUIRED, event
        missing = REQUIRED[phase] - set(event)
        assert not missing, f"{event} lacks {missing}"
        assert isinstance(event["name"], str) and isinstance(event["pid"], int)
        if "ts" in event:
            assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if phase == "X":
            assert event["dur"] >= 0 and isinstance(event["args"], dict)
            complete.append(event)
        if phase == "C":
            assert all(isinstance(v, (int, float)) and v >= 0 for v in event["args"].values())
    flows = {}
    for event in trace["traceEvents"]:
        if event["ph"] in "sf":
            flows.setdefault(event["id"], []).append(event["ph"])
    assert all(sorted(phases) == ["f", "s"] for phases in flows.values()), flows
    by_thread = {}
    for event in complete:
        by_thread.setdefault((event["pid"], event["tid"]), []).append(event)
    epsilon = 0.002  # microseconds: ts and dur are rounded to the nanosecond separately
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for event in events:
            while open_ends and open_ends[-1] <= event["ts"] + epsilon:
                open_ends.pop()
            if open_ends:  # inside the innermost open range: it must end within it
                assert event["ts"] + event["dur"] <= open_ends[-1] + epsilon, f"{event['name']} overlaps its parent"
            open_ends.append(event["ts"] + event["dur"])
    return complete


def test_the_chrome_trace_is_valid_json_with_nested_ranges(net, batch, tmp_path):
    with profile(record_shapes=True, profile_memory=True, with_modules=True, with_stack=True) as prof:
        with record_function("train_step"):
            with record_function("forward"):
                loss = net(batch).sum()
            loss.backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    complete = validate_trace(trace)
    names = [e["name"] for e in complete]
    assert names.count("conv") == 2 and "nn.Module: Net.features.0.conv" in names
    assert sum(1 for e in complete if e["cat"] == "cpu_op") == len([e for e in prof.events() if e.kind != "user_annotation"])
    by_name = {e["name"]: e for e in complete}
    step, forward, module = by_name["train_step"], by_name["forward"], by_name["nn.Module: Net"]
    # record_function and module ranges nest: train_step > forward > Net > its ops.
    assert step["ts"] <= forward["ts"] <= module["ts"]
    assert module["ts"] + module["dur"] <= forward["ts"] + forward["dur"] + 0.002
    conv = next(e for e in complete if e["name"] == "conv")
    assert conv["args"]["Input Dims"] == [[3, 1, 8, 8], [4, 1, 3, 3], [4]]
    assert conv["args"]["Module"] == "Net.features.0.conv" and conv["args"]["Allocated bytes"] > 0
    backward = next(e for e in complete if e["name"] == "ConvolutionBackward0")
    assert backward["args"]["Fwd op"] == "conv" and "Sequence number" in backward["args"]
    assert any(e["ph"] == "C" for e in trace["traceEvents"])
    assert trace["otherData"]["events_written"] == trace["otherData"]["events_recorded"]


def test_the_trace_loads_in_perfettos_trace_processor(net, batch, tmp_path):
    trace_processor = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    with profile(with_modules=True) as prof:
        net(batch).sum().backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    try:
        processor = trace_processor.TraceProcessor(trace=str(path))
    except Exception as error:  # it downloads its binary on first use; offline machines can't
        pytest.skip(f"perfetto's trace processor cannot start here: {error}")
    rows = list(processor.query("select name, depth from slice"))
    depth = {row.name: row.depth for row in rows}
    assert depth["nn.Module: Net"] == 0 and depth["nn.Module: Net.features"] == 1
    assert sum(1 for row in rows if row.name == "conv") == 2


def test_gzip_export(tmp_path):
    with profile() as prof:
        corenn.ones(3) + 1
    path = tmp_path / "trace.json.gz"
    prof.export_chrome_trace(str(path))
    validate_trace(json.loads(gzip.decompress(path.read_bytes())))


def test_a_big_trace_is_bounded_aggregated_and_still_nests(tmp_path):
    x = corenn.ones(2)
    with profile(max_trace_events=300) as prof:
        for step in range(20):
            with record_function(f"step {step}"):
                for _ in range(100):  # 2000 tiny ops in a row: aggregated per step
                    x = x + 0
                corenn.ones(200, 200) @ corenn.ones(200, 200)  # one long op, kept as it is
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    complete = validate_trace(trace)
    assert len(complete) <= 300
    assert trace["otherData"]["events_recorded"] == 20 * 102
    adds = [e for e in complete if e["name"] == "add" or e["name"].startswith("add (x")]
    # Every add is accounted for; runs are broken only where one add happened to take long (a GC pause).
    assert sum(e["args"].get("Aggregated events", 1) for e in adds) == 2000
    aggregated = [e for e in adds if "Aggregated events" in e["args"]]
    assert 20 <= len(aggregated) <= len(adds) < 100
    assert max(e["args"]["Aggregated events"] for e in aggregated) >= 50
    assert all(e["name"] == f"add (x{e['args']['Aggregated events']})" for e in aggregated)
    assert sum(1 for e in complete if e["name"] == "matmul") == 20
    # Unbounded, every event is written.
    unbounded = profile(max_trace_events=None)
    unbounded.trace = prof.trace
    prof.trace.max_trace_events = None
    prof.export_chrome_trace(str(path))
    assert len(validate_trace(json.loads(path.read_text()))) == 20 * 102


def test_a_trace_over_the_limit_after_aggregating_keeps_the_longest_with_their_parents(tmp_path):
    with profile(max_trace_events=10) as prof:
        for i in range(30):
            with record_function(f"range {i}"):
                corenn.ones(10 + i) * 2
    path = tmp_path / "trace.json"
    with pytest.warns(UserWarning, match=r"export_chrome_trace\(\): 60 events recorded; wrote the"):
        prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    complete = validate_trace(trace)
    names = {e["name"] for e in complete}
    for event in complete:  # every kept op keeps its range
        if event["cat"] == "cpu_op":
            assert any(other["name"].startswith("range") and other["ts"] <= event["ts"] for other in complete)
    assert len(complete) <= 20 and names
    assert trace["otherData"]["events_written"] == len(complete)


def test_trace_size_grows_linearly_with_steps(tmp_path):
    """What docs/profiler.md states: about the same number of bytes per event, whatever the step count."""
    sizes = []
    for steps in (10, 40):
        x = corenn.ones(4, requires_grad=True)
        with profile(record_shapes=True) as prof:
            for _ in range(steps):
                (x * 2).sum().backward()
        path = tmp_path / f"trace{steps}.json"
        prof.export_chrome_trace(str(path))
        sizes.append(os.path.getsize(path) / len(prof.events()))
    assert sizes[0] == pytest.approx(sizes[1], rel=0.15)
    assert 100 < sizes[1] < 400  # bytes per event, as the docs say


def test_export_stacks_writes_folded_stacks(tmp_path):
    def leaf(t):
        return t.exp()

    with profile(with_stack=True) as prof:
        leaf(corenn.ones(1000))
    path = tmp_path / "stacks.txt"
    prof.export_stacks(str(path))
    lines = path.read_text().splitlines()
    assert lines
    for line in lines:
        frames, value = line.rsplit(" ", 1)
        assert int(value) >= 1 and " " not in frames
    exp_line = next(line for line in lines if line.split(" ")[0].endswith(";exp"))
    frames = exp_line.split(" ")[0].split(";")
    assert frames[-2].endswith(":_leaf") and frames[-3].endswith(":_test_export_stacks_writes_folded_stacks")
    with profile() as no_stack:
        corenn.ones(1) + 1
    with pytest.raises(RuntimeError, match="with_stack=True"):
        no_stack.export_stacks(str(path))


def test_tensorboard_trace_handler_writes_one_file_per_cycle(tmp_path):
    handler = tensorboard_trace_handler(str(tmp_path), worker_name="worker0")
    with profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=2), on_trace_ready=handler) as prof:
        for _ in range(5):
            corenn.ones(2) + 1
            prof.step()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(f.startswith("worker0.") and f.endswith(".pt.trace.json") for f in files)
    for name in files:
        validate_trace(json.loads((tmp_path / name).read_text()))


def test_plot_saves_png_and_svg(net, batch, tmp_path):
    pytest.importorskip("matplotlib")
    with profile(with_modules=True) as prof:
        net(batch).sum().backward()
    png, svg = tmp_path / "modules.png", tmp_path / "modules.svg"
    prof.plot(str(png))
    prof.plot(str(svg))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "Net.features.0.conv (Conv2d)" in text
    ops_png = tmp_path / "ops.png"
    prof.plot(str(ops_png), kind="ops")
    assert ops_png.stat().st_size > 5000
    with pytest.raises(ValueError, match=r"plot\(\): argument 'path' must end in .png, .svg or .pdf"):
        prof.plot(str(tmp_path / "x.bmp"))


def test_python_m_corenn_profiler_profiles_a_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import sys
        import corenn, corenn.nn as nn
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            model(corenn.randn(16, 4)).pow(2).mean().backward()
            optimizer.step()
        print("trained", sys.argv[1:])
    """))
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, "-m", "corenn_profiler", "-o", str(out), str(script), "--epochs", "1"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "trained ['--epochs', '1']"
    assert "Self CPU time total:" in result.stderr
    report = (out / "profile.txt").read_text()
    assert "# of Calls" in report and "Sequential" in report and "Peak memory:" in report
    validate_trace(json.loads((out / "trace.json").read_text()))
    assert (out / "stacks.txt").read_text()
    try:
        import matplotlib  # noqa: F401
        assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    except ImportError:
        assert "no picture" in result.stderr


def test_python_m_corenn_profiler_keeps_the_scripts_exit_code(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import corenn, sys\ncorenn.ones(2) + 1\nsys.exit(3)\n")
    result = subprocess.run([sys.executable, "-m", "corenn_profiler", "-o", str(tmp_path / "r"), str(script)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 3 and (tmp_path / "r" / "trace.json").exists()
