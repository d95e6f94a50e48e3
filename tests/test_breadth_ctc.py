"""CTC loss (corenn.ctc_loss, F.ctc_loss, nn.CTCLoss) against PyTorch 2.13: values and the gradient with respect
to log_probs (PyTorch's formula), reductions, zero_infinity, blank, target layouts, gradcheck through
log_softmax, errors."""
from __future__ import annotations

import numpy as np
import pytest

import corenn
import corenn.nn.functional as F
from corenn import nn
from corenn.autograd import gradcheck

from _breadth_oracle import compare_with_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
pytestmark = pytest.mark.torch
RNG = np.random.default_rng(1906)


def log_probs(T, N, C):
    logits = RNG.standard_normal((T, N, C))
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


# targets with repeats (1, 1 needs a blank between), an empty target, one at the frames' limit
TARGETS = np.array([[1, 1, 2, 3], [2, 0, 0, 0], [4, 3, 4, 0], [3, 0, 0, 0]])
TARGET_LENGTHS = [4, 0, 3, 1]
INPUT_LENGTHS = [9, 6, 7, 1]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("lengths_as", ["tuple", "tensor"])
def test_ctc_loss_matches_torch(reduction, lengths_as):
    def lengths(lib, values):
        return lib.tensor(values) if lengths_as == "tensor" else tuple(values)
    compare_with_torch(
        lambda lp: F.ctc_loss(lp, corenn.tensor(TARGETS), lengths(corenn, INPUT_LENGTHS),
                              lengths(corenn, TARGET_LENGTHS), reduction=reduction),
        lambda lp: TF.ctc_loss(lp, torch.tensor(TARGETS), lengths(torch, INPUT_LENGTHS),
                               lengths(torch, TARGET_LENGTHS), reduction=reduction),
        [log_probs(9, 4, 5)], torch)


def test_concatenated_targets_blank_and_module_match_torch():
    flat = np.concatenate([row[:n] for row, n in zip(TARGETS, TARGET_LENGTHS)])
    flat = np.where(flat == 2, 0, flat)  # blank is 2 here: class 0 is an ordinary label
    ours, theirs = nn.CTCLoss(blank=2, reduction="sum"), torch.nn.CTCLoss(blank=2, reduction="sum")
    compare_with_torch(lambda lp: ours(lp, corenn.tensor(flat), INPUT_LENGTHS, TARGET_LENGTHS),
                       lambda lp: theirs(lp, torch.tensor(flat), INPUT_LENGTHS, TARGET_LENGTHS),
                       [log_probs(9, 4, 5)], torch)


def test_unbatched_matches_torch():
    for reduction in ("none", "mean"):
        compare_with_torch(lambda lp: F.ctc_loss(lp, corenn.tensor([1, 2, 2]), [7], [3], reduction=reduction),
                           lambda lp: TF.ctc_loss(lp, torch.tensor([1, 2, 2]), [7], [3], reduction=reduction),
                           [log_probs(7, 1, 4)[:, 0]], torch)


def test_impossible_alignments_and_zero_infinity_match_torch():
    # sample 0 needs 2 * 3 - 1 = 5 frames for 1 1 1 and gets 4; sample 2 has no frame
    targets, inputs, lengths = np.array([[1, 1, 1], [2, 3, 0], [1, 0, 0]]), [4, 6, 0], [3, 2, 1]
    lp = log_probs(6, 3, 4)
    out = F.ctc_loss(corenn.tensor(lp), corenn.tensor(targets), inputs, lengths, reduction="none")
    expected = TF.ctc_loss(torch.tensor(lp), torch.tensor(targets), inputs, lengths, reduction="none")
    np.testing.assert_allclose(out.numpy(), expected.numpy())
    assert np.isinf(out.numpy()[[0, 2]]).all()
    for reduction in ("none", "mean", "sum"):
        compare_with_torch(
            lambda t: F.ctc_loss(t, corenn.tensor(targets), inputs, lengths, reduction=reduction, zero_infinity=True),
            lambda t: TF.ctc_loss(t, torch.tensor(targets), inputs, lengths, reduction=reduction, zero_infinity=True),
            [lp], torch)
    empty = F.ctc_loss(corenn.tensor(lp), corenn.tensor(targets), [0, 6, 0], [0, 2, 1], reduction="none")
    np.testing.assert_array_equal(empty.numpy()[[0, 2]], [0.0, np.inf])


def test_float32_matches_torch():
    lp = log_probs(9, 4, 5).astype(np.float32)
    ours_lp, theirs_lp = corenn.tensor(lp, requires_grad=True), torch.tensor(lp, requires_grad=True)
    ours = corenn.ctc_loss(ours_lp, corenn.tensor(TARGETS), INPUT_LENGTHS, TARGET_LENGTHS)
    theirs = torch.ctc_loss(theirs_lp, torch.tensor(TARGETS), INPUT_LENGTHS, TARGET_LENGTHS)
    assert ours.dtype == corenn.float32
    assert tuple(ours.shape) == (4,)  # no reduction when it is left out, as torch.ctc_loss (see nn_functions)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(ours_lp.grad.numpy(), theirs_lp.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_gradcheck_through_log_softmax():
    # PyTorch's gradient is the derivative with respect to the logits of a log_softmax (its eq. 16): the
    # exp(log_probs) term cancels there, so finite differences agree through log_softmax
    logits = corenn.tensor(RNG.standard_normal((6, 2, 4)), requires_grad=True)
    for reduction in ("none", "mean"):
        assert gradcheck(lambda x: F.ctc_loss(x.log_softmax(2), corenn.tensor([[1, 3, 3], [2, 0, 0]]), [6, 5],
                                              [3, 1], reduction=reduction), (logits,))


def test_torch_level_ctc_loss_takes_an_int_reduction():
    lp = log_probs(9, 4, 5)
    for reduction in (0, 1, 2):
        compare_with_torch(lambda t: corenn.ctc_loss(t, corenn.tensor(TARGETS), INPUT_LENGTHS, TARGET_LENGTHS, 0,
                                                     reduction),
                           lambda t: torch.ctc_loss(t, torch.tensor(TARGETS), INPUT_LENGTHS, TARGET_LENGTHS, 0,
                                                    reduction), [lp], torch)


def test_ctc_loss_errors():
    lp, targets = corenn.tensor(log_probs(5, 2, 4)), corenn.tensor([[1, 2], [3, 3]])
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 5, but got value 6"):
        F.ctc_loss(lp, targets, [6, 5], [1, 2])
    with pytest.raises(RuntimeError, match="Expected tensor to have size at least 3 at dimension 1, but got size 2"):
        F.ctc_loss(lp, targets, [5, 5], [3, 2])
    with pytest.raises(RuntimeError, match="input_lengths must be of size batch_size"):
        F.ctc_loss(lp, targets, [5], [1, 2])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, targets, [5, 5], [1, 2], blank=4)
    with pytest.raises(RuntimeError, match="Expected target_lengths to have value at least 0, but got value -1"):
        F.ctc_loss(lp, targets, [5, 5], [-1, 2])
    with pytest.raises(RuntimeError, match="Expected tensor to have size 4 at dimension 0, but got size 3"):
        F.ctc_loss(lp, corenn.tensor([1, 2, 3]), [5, 5], [2, 2])
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        F.ctc_loss(lp, targets, [5, 5], [1, 2], reduction="bad")
    with pytest.raises(TypeError, match="must be tuple of ints or Tensor, not int"):
        F.ctc_loss(lp[:, 0], corenn.tensor([1, 2]), 5, 2)
