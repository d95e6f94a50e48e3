"""The ``Summary`` protocol buffers that :class:`~corenn.utils.tensorboard.SummaryWriter` writes.

Each builder takes corenn tensors, numpy arrays or Python numbers and returns a ``Summary`` of
TensorBoard's own protobufs (``tensorboard.compat.proto``), laid out as ``torch.utils.tensorboard``
lays them out, so TensorBoard's plugins (scalars, histograms, images, text, hparams) read them as
they read PyTorch's. Images are encoded as PNG here (zlib and struct), so Pillow is not needed.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

__all__ = ["convert_to_HWC", "encode_png", "figure_to_image", "hparams", "histogram", "histogram_raw", "image",
           "make_grid", "make_histogram", "make_np", "scalar", "text"]


def make_np(value, where: str = "value") -> np.ndarray:
    """``value`` (a corenn Tensor, numpy array or Python number) as a numpy array.

    bfloat16 and float8 tensors come back as float32 arrays, since numpy's own routines (histogram,
    clip, dot) do not all take ml_dtypes' types.
    """
    from corenn.tensor.tensor import Tensor
    if isinstance(value, Tensor):
        # force: a tensor that requires grad, or lives on an accelerator, is still logged (PyTorch detaches and copies).
        array = value.numpy(force=True)
    elif isinstance(value, np.ndarray):
        array = value
    elif np.isscalar(value):
        array = np.array([value])
    else:
        raise NotImplementedError(f"{where}: got {type(value).__name__}, but a numpy array, a corenn Tensor or a "
                                  f"number is expected")
    if array.dtype.kind == "V" or array.dtype.name.startswith(("bfloat16", "float8")):
        array = array.astype(np.float32)
    return array


# -- scalars and histograms -----------------------------------------------------------------------

def scalar(name: str, value, new_style: bool = False, double_precision: bool = False,
           where: str = "add_scalar(): scalar_value") -> Summary:
    """A one-value summary: ``simple_value`` (old style, PyTorch's default) or a tensor for the scalars plugin."""
    array = make_np(value, where).squeeze()
    if array.ndim != 0:
        raise AssertionError(f"{where} should contain one element (0 dimensions); was given size {array.size} "
                             f"and {array.ndim} dimensions")
    number = float(array)
    if not new_style:
        return Summary(value=[Summary.Value(tag=name, simple_value=number)])
    tensor = (TensorProto(double_val=[number], dtype="DT_DOUBLE") if double_precision
              else TensorProto(float_val=[number], dtype="DT_FLOAT"))
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    return Summary(value=[Summary.Value(tag=name, tensor=tensor, metadata=metadata)])


def default_bins() -> list[float]:
    """TensorFlow's histogram bucket limits (``bins="tensorflow"``): ±1e-12 growing by 10% to 1e20, and 0."""
    value, positive, negative = 1e-12, [], []
    while value < 1e20:
        positive.append(value)
        negative.append(-value)
        value *= 1.1
    return negative[::-1] + [0] + positive


def make_histogram(values: np.ndarray, bins, max_bins: int | None = None) -> HistogramProto:
    """A HistogramProto of ``values`` as TensorBoard expects it: only the bins spanning the data are kept,
    with one empty bin in front, since TensorBoard stores right bin edges only."""
    if values.size == 0:
        raise ValueError("add_histogram(): values has no element")
    values = values.reshape(-1)
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        # Merge neighbouring bins (padding the last group with empty bins) so at most about max_bins remain.
        group = len(counts) // max_bins
        remainder = len(counts) % group
        if remainder:
            counts = np.pad(counts, (0, group - remainder))
        counts = counts.reshape(-1, group).sum(axis=-1)
        merged_limits = np.empty(counts.size + 1, limits.dtype)
        merged_limits[:-1] = limits[:-1:group]
        merged_limits[-1] = limits[-1]
        limits = merged_limits
    nonempty_so_far = np.cumsum(counts > 0)
    first, last = np.searchsorted(nonempty_so_far, [0, nonempty_so_far[-1] - 1], side="right")
    first, end = int(first), int(last) + 1
    counts = counts[first - 1:end] if first > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[first:end + 1]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("add_histogram(): values fall in no bin (are they all NaN or outside the bins?)")
    return HistogramProto(min=float(values.min()), max=float(values.max()), num=len(values),
                          sum=float(values.sum()), sum_squares=float(values.dot(values)),
                          bucket_limit=limits.tolist(), bucket=counts.tolist())


def histogram(name: str, values, bins, max_bins: int | None = None) -> Summary:
    """A histogram summary of ``values`` (any shape) over ``bins`` (as numpy.histogram takes them)."""
    array = make_np(values, "add_histogram(): values").astype(float)
    return Summary(value=[Summary.Value(tag=name, histo=make_histogram(array, bins, max_bins))])


def histogram_raw(name: str, min, max, num, sum, sum_squares, bucket_limits, bucket_counts) -> Summary:
    """A histogram summary from statistics already computed."""
    histo = HistogramProto(min=min, max=max, num=num, sum=sum, sum_squares=sum_squares,
                           bucket_limit=list(bucket_limits), bucket=list(bucket_counts))
    return Summary(value=[Summary.Value(tag=name, histo=histo)])


# -- images -----------------------------------------------------------------------------------------

def make_grid(images: np.ndarray, ncols: int = 8) -> np.ndarray:
    """N1HW or N3HW images tiled into one 3HW image, ``ncols`` to a row (PyTorch's layout)."""
    if images.shape[1] == 1:
        images = np.concatenate([images, images, images], 1)
    if images.ndim != 4 or images.shape[1] != 3:
        raise AssertionError(f"add_images(): img_tensor should have 1 or 3 channels, got shape {images.shape} in NCHW")
    count, _, height, width = images.shape
    ncols = min(count, ncols)
    nrows = -(-count // ncols)
    canvas = np.zeros((3, height * nrows, width * ncols), dtype=images.dtype)
    for index in range(count):
        row, col = divmod(index, ncols)
        canvas[:, row * height:(row + 1) * height, col * width:(col + 1) * width] = images[index]
    return canvas


def convert_to_HWC(array: np.ndarray, dataformats: str, where: str = "add_image()") -> np.ndarray:
    """``array`` laid out as ``dataformats`` (NCHW, NHWC, CHW, HWC, HW, WH...) turned into one HWC image.

    A mismatch raises AssertionError, the type PyTorch raises there."""
    dataformats = dataformats.upper()
    if len(set(dataformats)) != len(dataformats):
        raise AssertionError(f"{where}: dataformats {dataformats!r} uses a dimension letter twice")
    if array.ndim != len(dataformats):
        raise AssertionError(f"{where}: img_tensor has {array.ndim} dimensions (shape {tuple(array.shape)}) but "
                         f"dataformats {dataformats!r} has {len(dataformats)}")
    wanted = {4: "NCHW", 3: "HWC", 2: "HW"}.get(len(dataformats))
    if wanted is None or set(dataformats) != set(wanted):
        raise AssertionError(f"{where}: dataformats {dataformats!r} should be a permutation of NCHW, HWC or HW")
    array = array.transpose([dataformats.find(letter) for letter in wanted])
    if len(dataformats) == 4:
        return make_grid(array).transpose(1, 2, 0)
    if len(dataformats) == 3:
        return np.concatenate([array] * 3, 2) if array.shape[2] == 1 else array
    return np.stack([array, array, array], 2)


def encode_png(pixels: np.ndarray) -> bytes:
    """A PNG file of HWC uint8 ``pixels`` with 1 (grey), 3 (RGB) or 4 (RGBA) channels, 8 bits each."""
    height, width, channels = pixels.shape
    colour_type = {1: 0, 3: 2, 4: 6}[channels]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    # Every scanline starts with its filter type; 0 (None) keeps the encoder trivial, zlib does the compressing.
    rows = np.concatenate([np.zeros((height, 1), np.uint8),
                           np.ascontiguousarray(pixels, dtype=np.uint8).reshape(height, width * channels)], axis=1)
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + chunk(b"IEND", b""))


def image(tag: str, img_tensor, dataformats: str = "NCHW", where: str = "add_image()") -> Summary:
    """An image summary: uint8 values are kept, other dtypes are taken as [0, 1] and scaled by 255; out-of-range
    values are clipped, as in PyTorch."""
    array = convert_to_HWC(make_np(img_tensor, f"{where}: img_tensor"), dataformats, where)
    scale = 1 if array.dtype == np.uint8 else 255
    pixels = (array.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    height, width, channels = pixels.shape
    encoded = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=encode_png(pixels))
    return Summary(value=[Summary.Value(tag=tag, image=encoded)])


def figure_to_image(figures, close: bool = True) -> np.ndarray:
    """A matplotlib figure rendered as a CHW uint8 array (a list of figures: NCHW). Needs matplotlib."""
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def render(figure) -> np.ndarray:
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        rgba = np.asarray(canvas.buffer_rgba())
        if close:
            plt.close(figure)
        return np.moveaxis(rgba[:, :, :3], 2, 0).copy()

    if isinstance(figures, list):
        return np.stack([render(figure) for figure in figures])
    return render(figures)


# -- text and hparams -------------------------------------------------------------------------------

def text(tag: str, text_string: str) -> Summary:
    """A text summary (markdown in TensorBoard's text plugin), under ``<tag>/text_summary`` as PyTorch writes it."""
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
    if not isinstance(text_string, str):
        raise TypeError(f"add_text(): text_string should be a str, got {type(text_string).__name__}")
    metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
    tensor = TensorProto(dtype="DT_STRING", string_val=[text_string.encode("utf-8")],
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
    return Summary(value=[Summary.Value(tag=tag + "/text_summary", metadata=metadata, tensor=tensor)])


def hparams(hparam_dict: dict, metric_dict: dict, hparam_domain_discrete: dict | None = None):
    """The three summaries TensorBoard's hparams plugin reads: experiment, session start (the values),
    session end. Booleans are recorded as booleans (PyTorch records them as numbers)."""
    from google.protobuf import struct_pb2
    from tensorboard.plugins.hparams import metadata as hp_metadata
    from tensorboard.plugins.hparams.api_pb2 import DataType, Experiment, HParamInfo, MetricInfo, MetricName, Status
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo

    from corenn.tensor.tensor import Tensor

    if not isinstance(hparam_dict, dict):
        raise TypeError(f"add_hparams(): hparam_dict should be a dict, got {type(hparam_dict).__name__}")
    if not isinstance(metric_dict, dict):
        raise TypeError(f"add_hparams(): metric_dict should be a dict, got {type(metric_dict).__name__}")
    hparam_domain_discrete = hparam_domain_discrete or {}
    if not isinstance(hparam_domain_discrete, dict):
        raise TypeError("add_hparams(): hparam_domain_discrete should be a dict, got "
                        f"{type(hparam_domain_discrete).__name__}")
    for name, domain in hparam_domain_discrete.items():
        if (name not in hparam_dict or not isinstance(domain, list)
                or not all(isinstance(choice, type(hparam_dict[name])) for choice in domain)):
            raise TypeError(f"add_hparams(): hparam_domain_discrete[{name!r}] should be a list of values of the "
                            f"type of hparam_dict[{name!r}]")

    infos, start = [], SessionStartInfo()
    for name, value in hparam_dict.items():
        if value is None:
            continue
        if isinstance(value, Tensor):
            value = float(make_np(value).reshape(-1)[0])
        # bool before numbers: bool is a subclass of int.
        if isinstance(value, bool):
            start.hparams[name].bool_value, kind, field = value, "DATA_TYPE_BOOL", "bool_value"
        elif isinstance(value, (int, float, np.number)):
            start.hparams[name].number_value, kind, field = float(value), "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(value, str):
            start.hparams[name].string_value, kind, field = value, "DATA_TYPE_STRING", "string_value"
        else:
            raise ValueError(f"add_hparams(): hparam_dict[{name!r}] should be an int, float, str, bool or "
                             f"Tensor, got {type(value).__name__}")
        domain = None
        if name in hparam_domain_discrete:
            domain = struct_pb2.ListValue(values=[struct_pb2.Value(**{field: choice})
                                                  for choice in hparam_domain_discrete[name]])
        infos.append(HParamInfo(name=name, type=DataType.Value(kind), domain_discrete=domain))

    def plugin_summary(tag: str, **content) -> Summary:
        data = HParamsPluginData(version=hp_metadata.PLUGIN_DATA_VERSION, **content)
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
            plugin_name=hp_metadata.PLUGIN_NAME, content=data.SerializeToString()))
        return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])

    experiment = Experiment(hparam_infos=infos, metric_infos=[MetricInfo(name=MetricName(tag=tag))
                                                              for tag in metric_dict])
    return (plugin_summary(hp_metadata.EXPERIMENT_TAG, experiment=experiment),
            plugin_summary(hp_metadata.SESSION_START_INFO_TAG, session_start_info=start),
            plugin_summary(hp_metadata.SESSION_END_INFO_TAG,
                           session_end_info=SessionEndInfo(status=Status.Value("STATUS_SUCCESS"))))
