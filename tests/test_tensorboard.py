"""corenn.utils.tensorboard.SummaryWriter: events written, then read back with TensorBoard's own loader,
and compared with what torch.utils.tensorboard writes for the same calls."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorboard")

import corenn  # noqa: E402
from corenn import nn  # noqa: E402
from corenn.utils.tensorboard import SummaryWriter  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: E402


def load(log_dir) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"images": 0, "histograms": 0, "scalars": 0,
                                                                "tensors": 0})
    accumulator.Reload()
    return accumulator


def events(log_dir) -> list:
    found = []
    for name in sorted(os.listdir(log_dir)):
        if name.startswith("events.out.tfevents"):
            found += list(EventFileLoader(os.path.join(log_dir, name)).Load())
    return found


def decode_png(data: bytes) -> np.ndarray:
    """PNG bytes as an HWC array, decoded by Pillow (matplotlib brings it) or else matplotlib."""
    try:
        from PIL import Image
        return np.asarray(Image.open(io.BytesIO(data)))
    except ImportError:
        import matplotlib.image
        return (matplotlib.image.imread(io.BytesIO(data), format="png") * 255).round().astype(np.uint8)


def torch_writer(log_dir):
    torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")
    return torch_tensorboard.SummaryWriter(str(log_dir))


# -- scalars ----------------------------------------------------------------------------------------

def test_scalars_round_trip_with_steps_and_walltime(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        for step in range(5):
            writer.add_scalar("loss", 1.0 / (step + 1), step, walltime=1000.0 + step)
        writer.add_scalar("tensor_value", corenn.tensor(2.5, requires_grad=True), 7)
        writer.add_scalar("numpy_value", np.float32(0.25), np.int64(8))
        writer.add_scalar("new_style", 3.0, 1, new_style=True)
    accumulator = load(tmp_path)
    loss = accumulator.Scalars("loss")
    assert [event.step for event in loss] == list(range(5))
    assert [event.value for event in loss] == pytest.approx([1.0 / (s + 1) for s in range(5)])
    assert [event.wall_time for event in loss] == [1000.0 + s for s in range(5)]
    assert accumulator.Scalars("tensor_value")[0].value == 2.5
    assert accumulator.Scalars("numpy_value")[0].step == 8
    new_style = accumulator.Tensors("new_style")[0]
    assert new_style.tensor_proto.float_val == [3.0]
    assert accumulator.SummaryMetadata("new_style").plugin_data.plugin_name == "scalars"


def test_scalar_of_many_elements_raises_as_pytorch(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        with pytest.raises(AssertionError, match="scalar_value"):
            writer.add_scalar("x", corenn.ones(3))
        with pytest.raises(NotImplementedError, match="scalar_value"):
            writer.add_scalar("x", [1.0])


def test_add_scalars_writes_one_run_per_tag_as_pytorch(tmp_path):
    with SummaryWriter(tmp_path / "corenn") as writer:
        for step in range(3):
            writer.add_scalars("run/14h", {"xsinx": step * np.sin(step), "xcosx": step * np.cos(step)}, step)
    with torch_writer(tmp_path / "torch") as writer:
        for step in range(3):
            writer.add_scalars("run/14h", {"xsinx": step * np.sin(step), "xcosx": step * np.cos(step)}, step)
    assert sorted(os.listdir(tmp_path / "corenn")) [1:] == sorted(os.listdir(tmp_path / "torch"))[1:] == [
        "run_14h_xcosx", "run_14h_xsinx"]
    for run in ("run_14h_xcosx", "run_14h_xsinx"):
        ours, theirs = load(tmp_path / "corenn" / run), load(tmp_path / "torch" / run)
        assert ours.Tags()["scalars"] == theirs.Tags()["scalars"] == ["run/14h"]
        assert [(e.step, e.value) for e in ours.Scalars("run/14h")] == [
            (e.step, e.value) for e in theirs.Scalars("run/14h")]


# -- histograms -------------------------------------------------------------------------------------

def test_histogram_buckets_match_numpy(tmp_path):
    values = np.random.default_rng(0).normal(size=2000).astype(np.float32)
    edges = np.linspace(-4, 4, 33)
    with SummaryWriter(tmp_path) as writer:
        writer.add_histogram("weights", corenn.tensor(values), 3, bins=edges)
    histogram = load(tmp_path).Histograms("weights")[0]
    assert histogram.step == 3
    value = histogram.histogram_value
    counts, _ = np.histogram(values.astype(float), bins=edges)
    # TensorBoard keeps the bins that span the data, with one empty bin in front (right edges only).
    nonempty = np.nonzero(counts)[0]
    first, last = nonempty[0], nonempty[-1]
    expected = [0] + counts[:last + 1].tolist() if first == 0 else counts[first - 1:last + 1].tolist()
    assert value.bucket == expected
    # Bucket i counts the values up to bucket_limit[i]: the empty first bucket ends where the data begins.
    assert value.bucket_limit == pytest.approx(edges[first:last + 2].tolist())
    assert sum(value.bucket) == value.num == values.size
    assert value.min == pytest.approx(values.min()) and value.max == pytest.approx(values.max())
    assert value.sum == pytest.approx(values.astype(float).sum())
    assert value.sum_squares == pytest.approx(values.astype(float).dot(values.astype(float)))


@pytest.mark.parametrize("bins, max_bins", [("tensorflow", None), ("auto", None), (64, 10), ("fd", 7)])
def test_histogram_matches_pytorch(tmp_path, bins, max_bins):
    values = np.random.default_rng(1).exponential(size=500)
    with SummaryWriter(tmp_path / "corenn") as writer:
        writer.add_histogram("h", values, 0, bins=bins, max_bins=max_bins)
    with torch_writer(tmp_path / "torch") as writer:
        writer.add_histogram("h", values, 0, bins=bins, max_bins=max_bins)
    ours = load(tmp_path / "corenn").Histograms("h")[0].histogram_value
    theirs = load(tmp_path / "torch").Histograms("h")[0].histogram_value
    assert ours.bucket == theirs.bucket
    assert ours.bucket_limit == pytest.approx(theirs.bucket_limit)
    assert (ours.min, ours.max, ours.num) == (theirs.min, theirs.max, theirs.num)


def test_histogram_of_nothing_raises(tmp_path):
    with SummaryWriter(tmp_path) as writer, pytest.raises(ValueError, match="add_histogram"):
        writer.add_histogram("h", np.zeros(0))


def test_histogram_raw(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        writer.add_histogram_raw("raw", 0.0, 3.0, 6, 9.0, 19.0, [1.0, 2.0, 3.0], [1, 2, 3], global_step=2)
        with pytest.raises(ValueError, match="bucket_limits"):
            writer.add_histogram_raw("raw", 0.0, 3.0, 6, 9.0, 19.0, [1.0, 2.0], [1, 2, 3])
    value = load(tmp_path).Histograms("raw")[0].histogram_value
    assert value.bucket == [1, 2, 3] and value.bucket_limit == [1.0, 2.0, 3.0]


# -- images -----------------------------------------------------------------------------------------

def image_pixels(log_dir, tag):
    image_event = load(log_dir).Images(tag)[0]
    return image_event, decode_png(image_event.encoded_image_string)


@pytest.mark.parametrize("dataformats, shape", [("CHW", (3, 6, 10)), ("HWC", (6, 10, 3)), ("HW", (6, 10)),
                                                ("CHW", (1, 6, 10)), ("HWC", (6, 10, 4))])
def test_image_pixels_match_pytorch(tmp_path, dataformats, shape):
    data = np.random.default_rng(2).uniform(-0.1, 1.1, size=shape).astype(np.float32)  # clipping too
    with SummaryWriter(tmp_path / "corenn") as writer:
        writer.add_image("img", corenn.tensor(data), 4, dataformats=dataformats)
    with torch_writer(tmp_path / "torch") as writer:
        writer.add_image("img", data, 4, dataformats=dataformats)
    ours, our_pixels = image_pixels(tmp_path / "corenn", "img")
    theirs, their_pixels = image_pixels(tmp_path / "torch", "img")
    assert (ours.step, ours.height, ours.width) == (4, 6, 10)
    assert (ours.height, ours.width) == (theirs.height, theirs.width)
    np.testing.assert_array_equal(our_pixels, their_pixels)


def test_uint8_image_is_kept_exactly(tmp_path):
    pixels = np.random.default_rng(3).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    with SummaryWriter(tmp_path) as writer:
        writer.add_image("u8", pixels, dataformats="HWC")
    _, decoded = image_pixels(tmp_path, "u8")
    np.testing.assert_array_equal(decoded, pixels)


@pytest.mark.parametrize("dataformats", ["NCHW", "NHWC"])
@pytest.mark.parametrize("count", [3, 11])
def test_add_images_grid_matches_pytorch(tmp_path, dataformats, count):
    batch = np.random.default_rng(4).uniform(size=(count, 3, 4, 5)).astype(np.float32)
    if dataformats == "NHWC":
        batch = batch.transpose(0, 2, 3, 1).copy()
    with SummaryWriter(tmp_path / "corenn") as writer:
        writer.add_images("batch", corenn.tensor(batch), 0, dataformats=dataformats)
    with torch_writer(tmp_path / "torch") as writer:
        writer.add_images("batch", batch, 0, dataformats=dataformats)
    ours, our_pixels = image_pixels(tmp_path / "corenn", "batch")
    _, their_pixels = image_pixels(tmp_path / "torch", "batch")
    rows = -(-count // 8)
    assert (ours.height, ours.width) == (4 * rows, 5 * min(count, 8))
    np.testing.assert_array_equal(our_pixels, their_pixels)


def test_image_shape_errors_name_the_argument(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        with pytest.raises(AssertionError, match="add_image.*img_tensor has 2 dimensions"):
            writer.add_image("bad", np.zeros((4, 4)))  # CHW by default
        with pytest.raises(AssertionError, match="dataformats 'CCW'"):
            writer.add_image("bad", np.zeros((3, 4, 4)), dataformats="CCW")


def test_add_figure(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure = plt.figure(figsize=(2, 1), dpi=50)
    plt.plot([0, 1], [1, 0])
    with SummaryWriter(tmp_path) as writer:
        writer.add_figure("fig", figure, 1)
    image_event, pixels = image_pixels(tmp_path, "fig")
    assert (image_event.width, image_event.height) == (100, 50) and pixels.shape == (50, 100, 3)
    assert not plt.fignum_exists(figure.number)  # closed, as close=True asks


# -- text and hparams -------------------------------------------------------------------------------

def test_text_round_trip(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        writer.add_text("notes", "**bold** ünïcode", 2)
    accumulator = load(tmp_path)
    event = accumulator.Tensors("notes/text_summary")[0]
    assert event.step == 2 and event.tensor_proto.string_val == ["**bold** ünïcode".encode()]
    assert accumulator.SummaryMetadata("notes/text_summary").plugin_data.plugin_name == "text"


def test_hparams_round_trip_with_tensorboard_plugin_data(tmp_path):
    from tensorboard.plugins.hparams import metadata as hp_metadata
    with SummaryWriter(tmp_path) as writer:
        writer.add_hparams({"lr": 0.1, "batch": 16, "optimizer": "sgd", "nesterov": True, "unused": None},
                           {"hparam/accuracy": 0.9}, hparam_domain_discrete={"optimizer": ["sgd", "adam"]},
                           run_name="trial0")
    run = load(tmp_path / "trial0")
    assert [(e.step, e.value) for e in run.Scalars("hparam/accuracy")] == [(0, pytest.approx(0.9))]
    def content(tag):
        return run.SummaryMetadata(tag).plugin_data.content

    assert run.SummaryMetadata(hp_metadata.EXPERIMENT_TAG).plugin_data.plugin_name == "hparams"
    experiment = hp_metadata.parse_experiment_plugin_data(content(hp_metadata.EXPERIMENT_TAG))
    assert [info.name for info in experiment.hparam_infos] == ["lr", "batch", "optimizer", "nesterov"]
    assert [value.string_value for value in experiment.hparam_infos[2].domain_discrete.values] == ["sgd", "adam"]
    assert [metric.name.tag for metric in experiment.metric_infos] == ["hparam/accuracy"]
    start = hp_metadata.parse_session_start_info_plugin_data(content(hp_metadata.SESSION_START_INFO_TAG))
    assert start.hparams["lr"].number_value == 0.1 and start.hparams["batch"].number_value == 16
    assert start.hparams["optimizer"].string_value == "sgd" and start.hparams["nesterov"].bool_value is True
    end = hp_metadata.parse_session_end_info_plugin_data(content(hp_metadata.SESSION_END_INFO_TAG))
    assert end.status == 1  # STATUS_SUCCESS


def test_hparams_argument_errors(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        with pytest.raises(TypeError, match="hparam_dict"):
            writer.add_hparams([("lr", 0.1)], {})
        with pytest.raises(TypeError, match=r"hparam_domain_discrete\['lr'\]"):
            writer.add_hparams({"lr": 0.1}, {}, hparam_domain_discrete={"lr": ["fast"]})
        with pytest.raises(ValueError, match=r"hparam_dict\['layers'\]"):
            writer.add_hparams({"layers": [1, 2]}, {})


# -- graph ------------------------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 5)

    def forward(self, x):
        return corenn.topk(corenn.sum(self.linear(x + self.linear.weight).relu(), dim=-1), 3)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.scale = nn.Parameter(corenn.ones(3))
        self.register_buffer("offset", corenn.zeros(3))

    def forward(self, x):
        values, _ = self.block(x)
        return values * self.scale + self.offset


def test_graph_nodes_ops_inputs_and_shapes(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        writer.add_graph(Net(), corenn.randn(5, 4))
    graph = load(tmp_path).Graph()
    nodes = {node.name: node for node in graph.node}
    assert list(nodes) == ["input/x", "Net/block/linear/block_linear_weight", "Net/add", "Net/block/linear/block_linear",
                           "Net/relu", "Net/sum_1", "Net/topk", "Net/getitem", "Net/getitem_1", "Net/scale", "Net/mul",
                           "Net/offset", "Net/add_1", "output/output"]
    assert {name: node.op for name, node in nodes.items()} == {
        "input/x": "IO Node", "Net/block/linear/block_linear_weight": "Parameter", "Net/add": "operator.add",
        "Net/block/linear/block_linear": "Linear", "Net/relu": "Tensor.relu", "Net/sum_1": "corenn.sum",
        "Net/topk": "corenn.topk", "Net/getitem": "operator.getitem", "Net/getitem_1": "operator.getitem",
        "Net/scale": "Parameter",
        "Net/mul": "operator.mul", "Net/offset": "Buffer", "Net/add_1": "operator.add", "output/output": "IO Node"}
    assert list(nodes["Net/add"].input) == ["input/x", "Net/block/linear/block_linear_weight"]
    assert list(nodes["output/output"].input) == ["Net/add_1"]
    shapes = {name: [[dim.size for dim in shape.dim] for shape in node.attr["_output_shapes"].list.shape]
              for name, node in nodes.items()}
    assert shapes["Net/block/linear/block_linear"] == [[5, 5]]
    assert shapes["Net/topk"] == [[3], [3]]
    assert shapes["Net/add_1"] == [[3]]
    assert nodes["Net/add_1"].device == "/device:CPU:0"
    assert b"call_function" in nodes["Net/sum_1"].attr["attr"].s


def test_graph_without_inputs_has_no_shapes_and_op_folder_clashes_are_renamed(tmp_path):
    class Clash(nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = nn.Sequential(nn.ReLU())

        def forward(self, x):
            return self.relu(corenn.nn.functional.relu(x))

    with SummaryWriter(tmp_path) as writer:
        writer.add_graph(Clash())
    names = [node.name for node in load(tmp_path).Graph().node]
    folders = {name.rsplit("/", depth)[0] for name in names for depth in range(1, name.count("/") + 1)}
    assert not folders & set(names)
    assert len(set(names)) == len(names)
    assert all("_output_shapes" not in node.attr for node in load(tmp_path).Graph().node)


def test_graph_rejects_what_is_not_a_module(tmp_path):
    with SummaryWriter(tmp_path) as writer, pytest.raises(TypeError, match="add_graph.*model"):
        writer.add_graph(lambda x: x)


# -- the writer's lifetime and log_dir -------------------------------------------------------------

def test_default_log_dir_and_comment(tmp_path, monkeypatch):
    import socket
    monkeypatch.chdir(tmp_path)
    writer = SummaryWriter(comment="_LR_0.1")
    writer.close()
    run_dir = writer.get_logdir()
    assert os.path.dirname(run_dir) == "runs"
    assert run_dir.endswith("_" + socket.gethostname() + "_LR_0.1")
    assert os.path.isdir(tmp_path / run_dir)
    assert SummaryWriter(tmp_path / "given", comment="ignored").get_logdir() == str(tmp_path / "given")


def test_flush_close_and_reuse_after_close(tmp_path):
    writer = SummaryWriter(tmp_path, flush_secs=1000, max_queue=1000)
    writer.add_scalar("x", 1.0, 0)
    writer.flush()
    assert load(tmp_path).Scalars("x")[0].value == 1.0  # flushed although the queue is not full
    writer.close()
    writer.close()  # twice is fine
    writer.add_scalar("x", 2.0, 1)  # a new event file, as in PyTorch
    writer.close()
    assert len([n for n in os.listdir(tmp_path) if n.startswith("events")]) == 2
    assert [e.value for e in load(tmp_path).Scalars("x")] == [1.0, 2.0]


def test_context_manager_closes(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        writer.add_scalar("x", 1.0, 0)
    assert writer.all_writers is None
    assert load(tmp_path).Scalars("x")[0].value == 1.0


def test_purge_step_writes_a_session_start_that_hides_later_steps(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        for step in range(10):
            writer.add_scalar("x", float(step), step)
    with SummaryWriter(tmp_path, purge_step=5) as writer:
        writer.add_scalar("x", 50.0, 5)
    starts = [e for e in events(tmp_path) if e.HasField("session_log")]
    assert [(e.step, e.session_log.status) for e in starts] == [(5, 1)]  # SessionLog.START
    assert [(e.step, e.value) for e in load(tmp_path).Scalars("x")] == [(s, float(s)) for s in range(5)] + [(5, 50.0)]


def test_filename_suffix(tmp_path):
    with SummaryWriter(tmp_path, filename_suffix=".corenn") as writer:
        writer.add_text("t", "x")
    assert all(name.endswith(".corenn") for name in os.listdir(tmp_path))


def test_missing_tensorboard_names_the_extra():
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "try:\n    import corenn.utils.tensorboard\nexcept ImportError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'corenn[tensorboard]'" in result.stdout, result.stderr


def test_importing_corenn_does_not_import_tensorboard():
    code = "import sys, corenn, corenn.utils, corenn.fx\nprint('tensorboard' in sys.modules)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr
