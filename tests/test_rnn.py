"""Recurrent layers (RNN, LSTM, GRU, their cells) and nn.utils.rnn against PyTorch 2.13 on copied weights:
outputs, final states and every gradient (input, h0/c0, parameters) in float64; packed sequences in both
sort orders; state dicts both ways; float64 gradcheck; PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
from corenn import nn
from corenn.autograd import gradcheck
from corenn.nn.utils import rnn as rnn_utils

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TOL = dict(rtol=1e-9, atol=1e-11)


def _copy_weights(ours, theirs):
    state = {k: corenn.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()}
    assert list(state) == list(ours.state_dict())
    ours.load_state_dict(state)


def _pair(cls_name, *args, **kwargs):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls_name)(*args, **kwargs).double()
    ours = getattr(nn, cls_name)(*args, **kwargs).double()
    _copy_weights(ours, theirs)
    return ours, theirs


def _both(array, requires_grad=True):
    return (corenn.tensor(array.copy(), requires_grad=requires_grad),
            torch.tensor(array.copy(), requires_grad=requires_grad))


def _close(a, b, what=""):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), err_msg=what, **TOL)


def _flat(result):
    if isinstance(result, (rnn_utils.PackedSequence, torch.nn.utils.rnn.PackedSequence)):
        return [result.data]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _flat(item)]
    return [result]


def _check_same(ours, theirs, our_inputs, their_inputs, **call):
    """Forward, then backward of a random weighting of every output; compare values and all gradients."""
    got = _flat(ours(*our_inputs, **call))
    expected = _flat(theirs(*their_inputs, **call))
    assert len(got) == len(expected)
    rng = np.random.default_rng(5)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert tuple(a.shape) == tuple(b.shape), f"output {i}"
        _close(a, b, f"output {i}")
    weights = [rng.standard_normal(tuple(b.shape)) for b in expected]
    sum(((a * corenn.tensor(w)).sum() for a, w in zip(got, weights)), corenn.tensor(0.0, dtype=corenn.float64)
        ).backward()
    sum((b * torch.tensor(w)).sum() for b, w in zip(expected, weights)).backward()
    for (name, p), (tname, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == tname
        _close(p.grad, tp.grad, f"grad of {name}")
    for a, b in zip(_flat(our_inputs), _flat(their_inputs)):
        if isinstance(b, torch.Tensor) and b.is_leaf and b.requires_grad:
            _close(a.grad, b.grad, "input grad")


CONFIGS = [
    ("RNN", dict()),
    ("RNN", dict(nonlinearity="relu", num_layers=2, bias=False)),
    ("RNN", dict(bidirectional=True, batch_first=True)),
    ("LSTM", dict()),
    ("LSTM", dict(num_layers=2, bidirectional=True)),
    ("LSTM", dict(batch_first=True, proj_size=3)),
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2, bias=False)),
    ("GRU", dict()),
    ("GRU", dict(num_layers=3, batch_first=True)),
    ("GRU", dict(num_layers=2, bidirectional=True, bias=False)),
]


def _state(mode, kwargs, batch, rng, unbatched=False):
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    hidden = 5
    out = kwargs.get("proj_size") or hidden
    shape = (layers, out) if unbatched else (layers, batch, out)
    h = rng.standard_normal(shape)
    if mode != "LSTM":
        return h
    return h, rng.standard_normal((layers, hidden) if unbatched else (layers, batch, hidden))


@pytest.mark.parametrize("mode,kwargs", CONFIGS)
@pytest.mark.parametrize("with_state", [False, True])
def test_padded_input_matches_torch(mode, kwargs, with_state):
    ours, theirs = _pair(mode, 4, 5, **kwargs)
    rng = np.random.default_rng(1)
    shape = (3, 6, 4) if kwargs.get("batch_first") else (6, 3, 4)
    x, tx = _both(rng.standard_normal(shape))
    ours_in, theirs_in = [x], [tx]
    if with_state:
        state = _state(mode, kwargs, 3, rng)
        if mode == "LSTM":
            (h, th), (c, tc) = _both(state[0]), _both(state[1])
            ours_in.append((h, c))
            theirs_in.append((th, tc))
        else:
            h, th = _both(state)
            ours_in.append(h)
            theirs_in.append(th)
    _check_same(ours, theirs, ours_in, theirs_in)


@pytest.mark.parametrize("mode,kwargs", [CONFIGS[0], CONFIGS[4], CONFIGS[5], CONFIGS[9]])
def test_unbatched_input_matches_torch(mode, kwargs):
    ours, theirs = _pair(mode, 4, 5, **kwargs)
    rng = np.random.default_rng(2)
    x, tx = _both(rng.standard_normal((6, 4)))
    _check_same(ours, theirs, [x], [tx])
    state = _state(mode, kwargs, None, rng, unbatched=True)
    if mode == "LSTM":
        (h, th), (c, tc) = _both(state[0]), _both(state[1])
        _check_same(ours, theirs, [x, (h, c)], [tx, (th, tc)])
    else:
        h, th = _both(state)
        _check_same(ours, theirs, [x, h], [tx, th])


@pytest.mark.parametrize("mode,kwargs", CONFIGS)
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_input_matches_torch(mode, kwargs, enforce_sorted):
    kwargs = dict(kwargs, batch_first=False)
    ours, theirs = _pair(mode, 4, 5, **kwargs)
    rng = np.random.default_rng(3)
    lengths = [6, 4, 4, 1] if enforce_sorted else [3, 6, 1, 4]
    x, tx = _both(rng.standard_normal((6, 4, 4)))
    packed = rnn_utils.pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
    tpacked = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, enforce_sorted=enforce_sorted)
    assert packed.batch_sizes.tolist() == tpacked.batch_sizes.tolist()
    _close(packed.data, tpacked.data)
    state = _state(mode, kwargs, 4, rng)
    if mode == "LSTM":
        (h, th), (c, tc) = _both(state[0]), _both(state[1])
        ours_in, theirs_in = [packed, (h, c)], [tpacked, (th, tc)]
    else:
        h, th = _both(state)
        ours_in, theirs_in = [packed, h], [tpacked, th]
    _check_same(ours, theirs, ours_in, theirs_in)
    assert x.grad is not None
    _close(x.grad, tx.grad, "padded input grad through packing")


def test_packed_output_round_trips_through_pad_packed_sequence():
    ours, theirs = _pair("GRU", 4, 5, bidirectional=True)
    rng = np.random.default_rng(4)
    lengths = [2, 5, 3]
    x, tx = _both(rng.standard_normal((3, 5, 4)))
    out, h = ours(rnn_utils.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    tout, th = theirs(torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, batch_first=True, enforce_sorted=False))
    padded, got_lengths = rnn_utils.pad_packed_sequence(out, batch_first=True, padding_value=-1.0, total_length=7)
    tpadded, tlengths = torch.nn.utils.rnn.pad_packed_sequence(tout, batch_first=True, padding_value=-1.0,
                                                               total_length=7)
    assert got_lengths.tolist() == tlengths.tolist() == lengths
    _close(padded, tpadded)
    _close(h, th)
    w = rng.standard_normal(tuple(tpadded.shape))
    (padded * corenn.tensor(w)).sum().backward()
    (tpadded * torch.tensor(w)).sum().backward()
    _close(x.grad, tx.grad)


def test_pad_sequence_and_pack_sequence_match_torch():
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((n, 2)) for n in (3, 5, 1)]
    ours = [corenn.tensor(a) for a in arrays]
    theirs = [torch.tensor(a) for a in arrays]
    for batch_first in (False, True):
        for side in ("right", "left"):
            _close(rnn_utils.pad_sequence(ours, batch_first, 9.0, side),
                   torch.nn.utils.rnn.pad_sequence(theirs, batch_first, 9.0, side))
    packed = rnn_utils.pack_sequence(ours, enforce_sorted=False)
    tpacked = torch.nn.utils.rnn.pack_sequence(theirs, enforce_sorted=False)
    _close(packed.data, tpacked.data)
    assert packed.sorted_indices.tolist() == tpacked.sorted_indices.tolist()
    assert packed.unsorted_indices.tolist() == tpacked.unsorted_indices.tolist()
    for a, b in zip(rnn_utils.unpack_sequence(packed), arrays):
        np.testing.assert_array_equal(a.numpy(), b)
    with pytest.raises(RuntimeError, match="enforce_sorted"):
        rnn_utils.pack_sequence(ours)
    with pytest.raises(RuntimeError, match="greater than 0"):
        rnn_utils.pack_padded_sequence(corenn.zeros(3, 2, 1), [3, 0])
    with pytest.raises(ValueError, match="total_length"):
        rnn_utils.pad_packed_sequence(packed, total_length=2)
    assert isinstance(packed, tuple) and packed._fields == tpacked._fields


@pytest.mark.parametrize("cls_name,kwargs", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu", "bias": False}),
                                             ("LSTMCell", {}), ("GRUCell", {}), ("GRUCell", {"bias": False})])
def test_cells_match_torch(cls_name, kwargs):
    ours, theirs = _pair(cls_name, 4, 5, **kwargs)
    assert repr(ours) == repr(theirs)
    rng = np.random.default_rng(7)
    x, tx = _both(rng.standard_normal((3, 4)))
    _check_same(ours, theirs, [x], [tx])
    h, th = _both(rng.standard_normal((3, 5)))
    if cls_name == "LSTMCell":
        c, tc = _both(rng.standard_normal((3, 5)))
        _check_same(ours, theirs, [x, (h, c)], [tx, (th, tc)])
        got = ours(corenn.tensor(rng.standard_normal(4)))
        assert [tuple(t.shape) for t in got] == [(5,), (5,)]
    else:
        _check_same(ours, theirs, [x, h], [tx, th])
        assert tuple(ours(corenn.tensor(rng.standard_normal(4))).shape) == (5,)


@pytest.mark.parametrize("mode,kwargs", [("RNN", {}), ("LSTM", {"proj_size": 2}), ("GRU", {"bidirectional": True}),
                                         ("LSTM", {"bidirectional": True, "num_layers": 2})])
def test_gradcheck_float64(mode, kwargs):
    corenn.manual_seed(0)
    layer = getattr(nn, mode)(3, 4, **kwargs).double()
    x = corenn.randn(4, 2, 3, dtype=corenn.float64, requires_grad=True)
    assert gradcheck(lambda x: layer(x)[0], (x,))
    assert gradcheck(lambda x: layer(rnn_utils.pack_padded_sequence(x, [4, 2]))[0].data, (x,))
    w_hh = layer.weight_hh_l0.detach().clone().requires_grad_(True)
    assert gradcheck(lambda w: _output_as_function_of_weight_hh(layer, x.detach(), w), (w_hh,))


def _output_as_function_of_weight_hh(layer, x, w_hh):
    """The layer's output with its weight_hh_l0 parameter swapped for the tensor ``w_hh``."""
    saved = layer._parameters["weight_hh_l0"]
    try:
        layer._parameters["weight_hh_l0"] = w_hh
        return layer(x)[0]
    finally:
        layer._parameters["weight_hh_l0"] = saved


def test_state_dict_moves_both_ways_and_repr_matches():
    for mode, kwargs in CONFIGS:
        torch.manual_seed(1)
        theirs = getattr(torch.nn, mode)(4, 5, **kwargs)
        ours = getattr(nn, mode)(4, 5, **kwargs)
        assert repr(ours) == repr(theirs)
        assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
               [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
        theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
        for (k, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    assert repr(nn.RNN(2, 3, 1, "relu")) == repr(torch.nn.RNN(2, 3, 1, "relu"))


def test_default_initialisation_range_and_all_weights():
    layer = nn.LSTM(4, 16, num_layers=2, bidirectional=True)
    bound = 1 / 4
    for p in layer.parameters():
        assert float(p.abs().max()) <= bound
    assert len(layer.all_weights) == 4 and len(layer.all_weights[0]) == 4
    layer.flatten_parameters()


def test_dropout_between_layers_only_in_training():
    corenn.manual_seed(0)
    layer = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = corenn.randn(5, 2, 3)
    layer.eval()
    a, b = layer(x)[0], layer(x)[0]
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    layer.train()
    c = layer(x)[0]
    assert not np.allclose(a.detach().numpy(), c.detach().numpy())
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.LSTM(3, 4, dropout=0.2)


def test_errors_match_torch():
    lstm = nn.LSTM(4, 5)
    with pytest.raises(ValueError, match="Expected input to be 2D or 3D"):
        lstm(corenn.zeros(1, 2, 3, 4))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 4, got 3"):
        lstm(corenn.zeros(2, 3, 3))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 5\), got \[2, 3, 5\]"):
        lstm(corenn.zeros(2, 3, 4), (corenn.zeros(2, 3, 5), corenn.zeros(1, 3, 5)))
    with pytest.raises(RuntimeError, match="For batched 3-D input, hx and cx should also be 3-D"):
        lstm(corenn.zeros(2, 3, 4), (corenn.zeros(3, 5), corenn.zeros(3, 5)))
    with pytest.raises(RuntimeError, match=r"Expected hidden size \(1, 3, 5\), got \[1, 2, 5\]"):
        nn.GRU(4, 5)(corenn.zeros(2, 3, 4), corenn.zeros(1, 2, 5))
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        nn.GRU(4, 5, proj_size=2)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(4, 5, proj_size=5)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'sigmoid'"):
        nn.RNN(4, 5, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="dropout should be a number in range"):
        nn.GRU(4, 5, dropout=1.5)
    with pytest.raises(ValueError, match="hidden_size must be greater than zero"):
        nn.RNN(4, 0)
    with pytest.raises(TypeError, match="bias should be of type bool"):
        nn.RNN(4, 5, bias=1)
    with pytest.raises(ValueError, match="does not match weight dtype"):
        lstm(corenn.zeros(2, 3, 4, dtype=corenn.float64))
    with pytest.raises(ValueError, match="LSTMCell: Expected input to be 1D or 2D"):
        nn.LSTMCell(4, 5)(corenn.zeros(1, 2, 4))
    with pytest.raises(RuntimeError, match="inconsistent input_size"):
        nn.GRUCell(4, 5)(corenn.zeros(2, 3))


def test_trains_a_tiny_sequence_classifier():
    """An LSTM + Linear learns to tell increasing from decreasing sequences (the examples' use, tiny)."""
    corenn.manual_seed(0)
    rng = np.random.default_rng(0)
    base = np.sort(rng.standard_normal((64, 8, 1)), axis=1).astype(np.float32)
    labels = rng.integers(0, 2, 64)
    x = np.where(labels[:, None, None] == 1, base, base[:, ::-1]).copy()
    lstm, head = nn.LSTM(1, 16, batch_first=True), nn.Linear(16, 2)
    opt = corenn.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=0.02)
    inputs, targets = corenn.tensor(x), corenn.tensor(labels)
    for _ in range(60):
        _, (h, _) = lstm(inputs)
        loss = nn.functional.cross_entropy(head(h[-1]), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 0.1


def test_lstm_over_equal_length_sequences_is_one_node_per_layer_and_direction():
    # The whole direction is one lstm_layer node (its backward sums the weight gradient over all steps
    # in one product); packed sequences of different lengths still go step by step.
    layer = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    output, _ = layer(corenn.randn(6, 2, 3))

    def node_names(fn, seen):
        if fn is None or id(fn) in seen:
            return []
        seen.add(id(fn))
        return [fn.name()] + [name for next_fn, _ in fn.next_functions for name in node_names(next_fn, seen)]
    names = node_names(output.grad_fn, set())
    assert names.count("LstmLayerBackward0") == 4 and "LstmCellBackward0" not in names
    packed = rnn_utils.pack_padded_sequence(corenn.randn(6, 2, 3), [6, 3])
    assert "LstmCellBackward0" in node_names(layer(packed)[0].data.grad_fn, set())
