"""``corenn.ao.nn.quantized.dynamic``: int8 weights, activations quantized at run time, float in and out."""
from ...modules import DynamicLinear as Linear, DynamicLSTM as LSTM  # noqa: F401

__all__ = ["Linear", "LSTM"]
