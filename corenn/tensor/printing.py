"""How tensors print: PyTorch's format (``tensor([1., 2.], requires_grad=True)``), summarised when long."""
from __future__ import annotations

import math

import numpy as np

from corenn import _dtype


class _PrintOptions:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _PrintOptions()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """Change how tensors print (``torch.set_printoptions``)."""
    if profile == "default":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 4, 1000, 3, 80
    elif profile == "short":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 2, 1000, 2, 80
    elif profile == "full":
        PRINT_OPTS.precision, PRINT_OPTS.threshold, PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 4, math.inf, 3, 80
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            setattr(PRINT_OPTS, name, value)
    PRINT_OPTS.sci_mode = sci_mode


class _Formatter:
    """Chooses one format for all elements: integer-valued floats as ``1.``, fixed or scientific."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not self.floating:
            for value in flat:
                self.max_width = max(self.max_width, len(self._plain(value)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return  # only zeros and non-finite values: PyTorch pads nothing
        magnitudes = np.abs(finite)
        smallest, largest = magnitudes.min(), magnitudes.max()
        self.int_mode = bool((finite == np.ceil(finite)).all())
        precision = PRINT_OPTS.precision
        if self.int_mode:
            if largest / smallest > 1000.0 or largest > 1.0e8:
                self.sci_mode = True
                widths = [len(f"{v:.{precision}e}") for v in finite]
            else:
                widths = [len(f"{v:.0f}") + 1 for v in finite]
        else:
            if largest / smallest > 1000.0 or largest > 1.0e8 or smallest < 1.0e-4:
                self.sci_mode = True
                widths = [len(f"{v:.{precision}e}") for v in finite]
            else:
                widths = [len(f"{v:.{precision}f}") for v in finite]
        self.max_width = max(widths)
        if PRINT_OPTS.sci_mode is not None and PRINT_OPTS.sci_mode != self.sci_mode:
            # A forced mode sizes the columns on the format actually printed.
            self.sci_mode = PRINT_OPTS.sci_mode
            self.max_width = max(len(self.format_plain(v)) for v in finite)

    @staticmethod
    def _plain(value):
        if isinstance(value, (bool, np.bool_)):
            return "True" if value else "False"
        return str(int(value)) if not isinstance(value, (float, np.floating)) else repr(float(value))

    def format_plain(self, value) -> str:
        if not self.floating:
            return self._plain(value)
        value = float(value)
        precision = PRINT_OPTS.precision
        if self.sci_mode:
            return f"{value:.{precision}e}"
        if self.int_mode:
            text = f"{value:.0f}"
            return text if (math.isinf(value) or math.isnan(value)) else text + "."
        return f"{value:.{precision}f}"

    def format(self, value) -> str:
        text = self.format_plain(value)
        return " " * (self.max_width - len(text)) + text


def _summarized(values: np.ndarray, edgeitems: int) -> np.ndarray:
    """The elements that a summarised print shows (to size the format on)."""
    if values.ndim == 0:
        return values
    if values.shape[0] > 2 * edgeitems:
        values = np.concatenate([values[:edgeitems], values[-edgeitems:]])
    if values.ndim == 1:
        return values
    return np.stack([_summarized(v, edgeitems) for v in values])


def _format_1d(values, formatter, indent, summarize):
    edge = PRINT_OPTS.edgeitems
    element_width = formatter.max_width + 2
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / element_width)))
    if summarize and values.shape[0] > 2 * edge:
        items = [formatter.format(v) for v in values[:edge]] + [" ..."] + [formatter.format(v) for v in values[-edge:]]
    else:
        items = [formatter.format(v) for v in values]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _format_nd(values, formatter, indent, summarize):
    if values.ndim == 0:
        return formatter.format(values.item())
    if values.ndim == 1:
        return _format_1d(values, formatter, indent, summarize)
    edge = PRINT_OPTS.edgeitems
    if summarize and values.shape[0] > 2 * edge:
        rows = ([_format_nd(v, formatter, indent + 1, summarize) for v in values[:edge]] + ["..."]
                + [_format_nd(v, formatter, indent + 1, summarize) for v in values[-edge:]])
    else:
        rows = [_format_nd(v, formatter, indent + 1, summarize) for v in values]
    separator = "," + "\n" * (values.ndim - 1) + " " * (indent + 1)
    return "[" + separator.join(rows) + "]"


def format_values(values: np.ndarray, indent: int) -> str:
    summarize = values.size > PRINT_OPTS.threshold
    shown = _summarized(values, PRINT_OPTS.edgeitems) if summarize else values
    formatter = _Formatter(shown)
    return _format_nd(values, formatter, indent, summarize)


_DEFAULT_INT = _dtype.int64


def tensor_repr(t, prefix: str = "tensor(") -> str:
    values = t._host()
    if values.dtype.kind == "V":  # bfloat16 / float8 (ml_dtypes): printed through float32, exactly
        values = values.astype(np.float32)
    suffixes = []
    if t._device.type != "cpu":
        suffixes.append(f"device='{t._device}'")
    dtype = t.dtype
    if values.size == 0:
        body = "[]"
        if values.shape != (0,):
            suffixes.append(f"size={tuple(values.shape)}")
        if dtype is not _dtype.get_default_dtype():
            suffixes.append(f"dtype={dtype}")
    else:
        body = format_values(values, len(prefix))
        implicit = (_dtype.get_default_dtype(), _DEFAULT_INT, _dtype.bool_)
        if dtype not in implicit:
            suffixes.append(f"dtype={dtype}")
    if t._grad_fn is not None:
        suffixes.append(f"grad_fn=<{t._grad_fn.grad_fn_name}>")
    elif t._requires_grad:
        suffixes.append("requires_grad=True")
    text = prefix + body
    for suffix in suffixes:
        last_line = text.split("\n")[-1]
        if len(last_line) + len(suffix) + 2 > PRINT_OPTS.linewidth:
            text += ",\n" + " " * len(prefix) + suffix
        else:
            text += ", " + suffix
    return text + ")"
