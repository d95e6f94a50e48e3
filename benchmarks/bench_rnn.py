"""LSTM and GRU training steps side by side with PyTorch: the word-level language model of PyTorch's examples, tiny.

Rows (float32, same weights and data in every column): a 2-layer ``nn.LSTM`` (embedding 64 ->
hidden 64), sequence 35, batch 20 -- forward, loss on a linear decoder, backward -- the same
with one layer and a longer sequence, and a 2-layer ``nn.GRU``. Columns:

- corenn: the layer as shipped (an LSTM layer and direction over equal-length sequences is one
  ``lstm_layer`` kernel; a GRU step one ``gru_cell`` kernel);
- corenn, one op per gate: the same step written from single ops (a matmul, an add, a split,
  sigmoids, tanhs, multiplies), as ``nn.LSTM`` computed it before the fused step -- what the
  fusion buys;
- PyTorch 2.13 (CPU, its fused LSTM), timed in a child process on the same weights and data: in
  one process, PyTorch's OpenMP threads keep spinning after its calls and took the second core
  from numpy's, which made both columns swing by 2x from run to run.

    python benchmarks/bench_rnn.py [--repeats 20]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from timing import median_seconds

SHAPES = {"2-layer LSTM 64, seq 35, batch 20": ("LSTM", 2, 64, 35, 20),
          "1-layer LSTM 128, seq 100, batch 8": ("LSTM", 1, 128, 100, 8),
          "2-layer GRU 64, seq 35, batch 20": ("GRU", 2, 64, 35, 20)}


def _unfused_lstm_step(input_gates, state, w_hh, b_hh, w_hr=None):
    import corenn
    import corenn.nn.functional as F
    h, c = state
    gates = input_gates + F.linear(h, w_hh, b_hh)
    in_gate, forget_gate, cell_gate, out_gate = gates.chunk(4, -1)
    c = corenn.sigmoid(forget_gate) * c + corenn.sigmoid(in_gate) * corenn.tanh(cell_gate)
    h = corenn.sigmoid(out_gate) * corenn.tanh(c)
    return (h if w_hr is None else F.linear(h, w_hr)), c


def _unfused_gru_step(input_gates, state, w_hh, b_hh, w_hr=None):
    import corenn
    import corenn.nn.functional as F
    h = state[0]
    in_r, in_z, in_n = input_gates.chunk(3, -1)
    hid_r, hid_z, hid_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    reset, update = corenn.sigmoid(in_r + hid_r), corenn.sigmoid(in_z + hid_z)
    new = corenn.tanh(in_n + reset * hid_n)
    return (new + update * (h - new),)


UNFUSED = {"LSTM": _unfused_lstm_step, "GRU": _unfused_gru_step}


def _step_function(lib, mode, layers, hidden, length, batch):
    lib.manual_seed(0)
    lstm = getattr(lib.nn, mode)(hidden, hidden, num_layers=layers)
    decoder = lib.nn.Linear(hidden, 100)
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((length, batch, hidden)).astype(np.float32))
    target = lib.tensor(rng.integers(0, 100, (length * batch,)))
    return lstm, decoder, x, target


def _torch_times(weights_file: str, repeats: int) -> dict:
    """The PyTorch column: each workload's step on the saved weights and data, timed in this (child) process."""
    import torch
    torch.set_num_threads(2)
    saved = np.load(weights_file)
    times = {}
    for label, (mode, layers, hidden, length, batch) in SHAPES.items():
        t_lstm, t_decoder, t_x, t_target = _step_function(torch, mode, layers, hidden, length, batch)
        with torch.no_grad():  # corenn's weights and data
            for index, p in enumerate(list(t_lstm.parameters()) + list(t_decoder.parameters())):
                p.copy_(torch.from_numpy(saved[f"{label}/{index}"]))
            t_x.copy_(torch.from_numpy(saved[f"{label}/x"]))

        def torch_step():
            out, _ = t_lstm(t_x)
            torch.nn.functional.cross_entropy(t_decoder(out.reshape(-1, hidden)), t_target).backward()
        times[label] = median_seconds(torch_step, repeats)
    return times


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--torch-from", help=argparse.SUPPRESS)  # the child process: PyTorch's column only
    args = parser.parse_args(argv)
    if args.torch_from:
        print(json.dumps(_torch_times(args.torch_from, args.repeats)))
        return
    import corenn
    from corenn.nn.modules import rnn as corenn_rnn
    models = {label: _step_function(corenn, *shape) for label, shape in SHAPES.items()}
    reference = {}
    with tempfile.TemporaryDirectory() as directory:
        weights_file = os.path.join(directory, "weights.npz")
        arrays = {}
        for label, (lstm, decoder, x, _) in models.items():
            for index, p in enumerate(list(lstm.parameters()) + list(decoder.parameters())):
                arrays[f"{label}/{index}"] = p.detach().numpy()
            arrays[f"{label}/x"] = x.numpy()
        np.savez(weights_file, **arrays)
        child = subprocess.run([sys.executable, __file__, "--repeats", str(args.repeats), "--torch-from",
                                weights_file], capture_output=True, text=True)
        if child.returncode == 0:
            reference = json.loads(child.stdout.strip().splitlines()[-1])
        else:
            print(f"(PyTorch column not run: {child.stderr.strip().splitlines()[-1]})")
    print(f"{'workload':<38} {'corenn ms':>10} {'one op per gate ms':>19} {'PyTorch ms':>11} {'corenn/PT':>10} "
          f"{'fused speed-up':>15}")
    for label, (mode, layers, hidden, length, batch) in SHAPES.items():
        lstm, decoder, x, target = models[label]

        def corenn_step():
            out, _ = lstm(x)
            corenn.nn.functional.cross_entropy(decoder(out.reshape(-1, hidden)), target).backward()

        fused = median_seconds(corenn_step, args.repeats)
        shipped = corenn_rnn._STEPS[mode]
        corenn_rnn._STEPS[mode] = UNFUSED[mode]
        try:
            unfused = median_seconds(corenn_step, args.repeats)
        finally:
            corenn_rnn._STEPS[mode] = shipped
        theirs = reference.get(label)
        ratio = f"{fused / theirs:.2f}x" if theirs else "-"
        print(f"{label:<38} {fused * 1e3:>10.2f} {unfused * 1e3:>19.2f} "
              f"{(theirs or float('nan')) * 1e3:>11.2f} {ratio:>10} {unfused / fused:>14.2f}x")


if __name__ == "__main__":
    main()
