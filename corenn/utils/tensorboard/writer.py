"""``SummaryWriter`` and ``FileWriter``: PyTorch's TensorBoard writers on the tensorboard package's event file writer."""
from __future__ import annotations

import os
import time

from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from corenn.utils.tensorboard import summary as _summary

__all__ = ["FileWriter", "SummaryWriter"]


class FileWriter:
    """Writes Event protocol buffers to one event file in ``log_dir``, queued and flushed by a background thread
    (tensorboard's EventFileWriter): at ``max_queue`` pending events or every ``flush_secs`` seconds."""

    def __init__(self, log_dir, max_queue: int = 10, flush_secs: float = 120, filename_suffix: str = "") -> None:
        self.event_writer = EventFileWriter(str(log_dir), max_queue, flush_secs, filename_suffix)

    def get_logdir(self) -> str:
        return self.event_writer.get_logdir()

    def add_event(self, event: Event, step=None, walltime=None) -> None:
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            # int(): a step given as a numpy integer or a one-element tensor is not an int to protobuf.
            event.step = int(step)
        self.event_writer.add_event(event)

    def add_summary(self, summary, global_step=None, walltime=None) -> None:
        self.add_event(Event(summary=summary), global_step, walltime)

    def add_graph(self, graph_def, walltime=None) -> None:
        self.add_event(Event(graph_def=graph_def.SerializeToString()), None, walltime)

    def flush(self) -> None:
        self.event_writer.flush()

    def close(self) -> None:
        self.event_writer.close()

    def reopen(self) -> None:
        """Open a new event file in the same directory after :meth:`close` (nothing if still open)."""
        self.event_writer.reopen()


class SummaryWriter:
    """Writes TensorBoard event files into ``log_dir``, as ``torch.utils.tensorboard.SummaryWriter``.

    Args:
        log_dir: where to write; default ``runs/<Mon>DD_HH-MM-SS_<hostname><comment>``.
        comment: appended to the default ``log_dir``; ignored when ``log_dir`` is given.
        purge_step: after a crash and restart from step T, pass T: TensorBoard hides the old events at steps >= T.
        max_queue: events queued before a write forces a flush to disk.
        flush_secs: seconds between the background flushes.
        filename_suffix: appended to the event files' names.

    Example::

        >>> with SummaryWriter("runs/exp1") as writer:    # doctest: +SKIP
        ...     writer.add_scalar("loss", 0.5, global_step=1)
    """

    def __init__(self, log_dir=None, comment: str = "", purge_step=None, max_queue: int = 10,
                 flush_secs: float = 120, filename_suffix: str = "") -> None:
        if not log_dir:
            import socket
            from datetime import datetime
            current_time = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", current_time + "_" + socket.gethostname() + comment)
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        # Created now, dropped by close() and created again by the next add_* call (a new event file), as in PyTorch.
        self.file_writer = self.all_writers = None
        self._get_file_writer()
        self.default_bins = _summary.default_bins()

    def _get_file_writer(self) -> FileWriter:
        if self.all_writers is None or self.file_writer is None:
            self.file_writer = FileWriter(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:
                # A SessionLog START at step T is what tells TensorBoard to discard the events at steps >= T.
                self.file_writer.add_event(Event(step=self.purge_step, file_version="brain.Event:2"))
                self.file_writer.add_event(Event(step=self.purge_step, session_log=SessionLog(status=SessionLog.START)))
                self.purge_step = None
        return self.file_writer

    def get_logdir(self) -> str:
        """The directory the event files are written into."""
        return self.log_dir

    # -- scalars ------------------------------------------------------------------------------------
    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False,
                   double_precision: bool = False) -> None:
        """Log one number (a Python number, numpy scalar or one-element tensor) under ``tag``."""
        summary = _summary.scalar(tag, scalar_value, new_style=new_style, double_precision=double_precision)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None, walltime=None) -> None:
        """Log several numbers drawn on one chart: each goes to its own run, ``<log_dir>/<main_tag>_<tag>``."""
        if not isinstance(tag_scalar_dict, dict):
            raise TypeError(f"add_scalars(): tag_scalar_dict should be a dict, got {type(tag_scalar_dict).__name__}")
        walltime = time.time() if walltime is None else walltime
        root = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            run_dir = root + "/" + main_tag.replace("/", "_") + "_" + tag
            writer = self.all_writers.get(run_dir)
            if writer is None:
                writer = self.all_writers[run_dir] = FileWriter(run_dir, self.max_queue, self.flush_secs,
                                                                self.filename_suffix)
            writer.add_summary(_summary.scalar(main_tag, value, where="add_scalars(): tag_scalar_dict value"),
                               global_step, walltime)

    # -- histograms ---------------------------------------------------------------------------------
    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins=None) -> None:
        """Log the distribution of ``values``. ``bins``: "tensorflow" (TensorFlow's exponential buckets) or
        anything numpy.histogram takes ("auto", "fd", a count, edges)."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = self.default_bins
        self._get_file_writer().add_summary(_summary.histogram(tag, values, bins, max_bins=max_bins),
                                            global_step, walltime)

    def add_histogram_raw(self, tag: str, min, max, num, sum, sum_squares, bucket_limits, bucket_counts,
                          global_step=None, walltime=None) -> None:
        """Log a histogram from statistics already computed (``bucket_limits`` are right edges)."""
        if len(bucket_limits) != len(bucket_counts):
            raise ValueError(f"add_histogram_raw(): bucket_limits has {len(bucket_limits)} entries and "
                             f"bucket_counts {len(bucket_counts)}; they should be as many")
        summary = _summary.histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts)
        self._get_file_writer().add_summary(summary, global_step, walltime)

    # -- images -------------------------------------------------------------------------------------
    def add_image(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "CHW") -> None:
        """Log one image: uint8 in [0, 255], or floats in [0, 1]; ``dataformats`` CHW, HWC, HW, WH..."""
        self._get_file_writer().add_summary(_summary.image(tag, img_tensor, dataformats=dataformats),
                                            global_step, walltime)

    def add_images(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "NCHW") -> None:
        """Log a batch of images (NCHW or NHWC), tiled 8 to a row into one image."""
        summary = _summary.image(tag, img_tensor, dataformats=dataformats, where="add_images()")
        self._get_file_writer().add_summary(summary, global_step, walltime)

    def add_figure(self, tag: str, figure, global_step=None, close: bool = True, walltime=None) -> None:
        """Log a matplotlib figure (or a list of them, tiled) as an image. Needs matplotlib."""
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise ImportError("add_figure() needs matplotlib: pip install matplotlib") from error
        dataformats = "NCHW" if isinstance(figure, list) else "CHW"
        self.add_image(tag, _summary.figure_to_image(figure, close), global_step, walltime, dataformats=dataformats)

    # -- text, hparams, graph -----------------------------------------------------------------------
    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None) -> None:
        """Log a string (rendered as markdown by TensorBoard's text plugin)."""
        self._get_file_writer().add_summary(_summary.text(tag, text_string), global_step, walltime)

    def add_hparams(self, hparam_dict: dict, metric_dict: dict, hparam_domain_discrete=None, run_name=None,
                    global_step=None) -> None:
        """Log one trial's hyperparameters and final metrics for the hparams plugin.

        As in PyTorch, they go to a run of their own, ``<log_dir>/<run_name>`` (default: the current time),
        and each metric is also logged there as a scalar.
        """
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("add_hparams(): hparam_dict and metric_dict should be dictionaries, got "
                            f"{type(hparam_dict).__name__} and {type(metric_dict).__name__}")
        experiment, session_start, session_end = _summary.hparams(hparam_dict, metric_dict, hparam_domain_discrete)
        run_dir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=run_dir) as run_writer:
            for summary in (experiment, session_start, session_end):
                run_writer.file_writer.add_summary(summary, global_step)
            for tag, value in metric_dict.items():
                run_writer.add_scalar(tag, value, global_step)

    def add_graph(self, model, input_to_model=None, verbose: bool = False, use_strict_trace: bool = True) -> None:
        """Log ``model``'s graph, traced with corenn.fx (``symbolic_trace``), for TensorBoard's graph tab.

        ``input_to_model`` (a tensor or a tuple/list of tensors), when given, is run through the traced graph to
        record each node's output shape (shown on the edges). ``verbose`` prints the FX graph.
        ``use_strict_trace`` is accepted for PyTorch's signature; it is a TorchScript option and FX has no
        counterpart.
        """
        from corenn.fx import symbolic_trace
        from corenn.fx.passes.shape_prop import ShapeProp
        from corenn.nn import Module
        from corenn.utils.tensorboard._fx_graph import graph_def

        if not isinstance(model, Module):
            raise TypeError(f"add_graph(): model should be a corenn.nn.Module, got {type(model).__name__}")
        traced = symbolic_trace(model)
        if input_to_model is not None:
            inputs = tuple(input_to_model) if isinstance(input_to_model, (tuple, list)) else (input_to_model,)
            from corenn.autograd import no_grad
            with no_grad():
                ShapeProp(traced).propagate(*inputs)
        if verbose:
            print(traced.graph)
        self._get_file_writer().add_graph(graph_def(traced, type(model).__name__))

    # -- lifetime -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write every pending event of every run this writer opened to disk."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()

    def close(self) -> None:
        """Flush and close the event files. A later ``add_*`` call opens a new event file; closing twice is fine."""
        if self.all_writers is None:
            return
        for writer in self.all_writers.values():
            writer.flush()
            writer.close()
        self.file_writer = self.all_writers = None

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        self.close()
