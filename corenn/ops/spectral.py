"""The short-time Fourier transform, as real and imaginary parts (corenn has no complex dtypes).

``stft`` frames the signal with ``Tensor.unfold`` and takes each frame's DFT as two matrix
products (cosines and sines), so its gradient comes from ops whose backward is known.
"""
from __future__ import annotations

import math
import warnings

from corenn._argcheck import check_int, named, not_tensors
from corenn.ops.layout import unfold
from corenn.ops.linalg import matmul
from corenn.ops.movement import pad, reshape, stack
from corenn.tensor.tensor import Tensor


def _dft_matrices(n_fft, frequencies, like):
    """``cos`` and ``sin`` of ``2 pi f n / n_fft`` for n < n_fft, f < frequencies: (n_fft, frequencies) each."""
    xp = like._device._xp
    n = xp.arange(n_fft, dtype="float64")[:, None]
    f = xp.arange(frequencies, dtype="float64")[None, :]
    angle = 2 * math.pi * ((n * f) % n_fft) / n_fft  # reduced first: exact angles for large products
    dtype = like.dtype.numpy
    return (Tensor._wrap(xp.cos(angle).astype(dtype), like._device),
            Tensor._wrap(xp.sin(angle).astype(dtype), like._device))


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None):
    """The short-time Fourier transform of a 1-D signal or a batch of them (``torch.stft``).

    corenn has no complex dtypes: it supports ``return_complex=False``, PyTorch's older form, whose
    result has a last dimension of 2 (real and imaginary parts): (batch?, n_fft // 2 + 1, frames, 2)
    when ``onesided``. ``return_complex=True`` raises NotImplementedError.

    Example::

        >>> corenn.stft(corenn.ones(8), 4, window=corenn.ones(4), return_complex=False)[:, 0]
        tensor([[4., 0.],
                [0., 0.],
                [0., 0.]])
    """
    if not isinstance(input, Tensor):
        raise not_tensors(input=input)
    if return_complex is None:
        raise RuntimeError(named("stft requires the return_complex parameter be given for real inputs, and will "
                                 "further require that return_complex=True in a future PyTorch release."))
    if return_complex:
        raise NotImplementedError(named("stft(): return_complex=True needs complex dtypes, which corenn does not "
                                        "have; pass return_complex=False for the real and imaginary parts"))
    warnings.warn("stft with return_complex=False is deprecated. In a future pytorch release, stft will return "
                  "complex tensors for all inputs, and return_complex=False will raise an error.", UserWarning,
                  stacklevel=2)
    if input.ndim not in (1, 2):
        raise RuntimeError(named(f"stft: expected a 1D or 2D tensor, but got {input.ndim}D"))
    if not input.dtype.is_floating_point:
        raise RuntimeError(named(f"stft: expected a tensor of floating point or complex values, got {input.dtype}"))
    n_fft = check_int(n_fft, "n_fft")
    hop = n_fft // 4 if hop_length is None else check_int(hop_length, "hop_length")
    width = n_fft if win_length is None else check_int(win_length, "win_length")
    if n_fft <= 0:
        raise RuntimeError(named(f"stft: expected 0 < n_fft, but got n_fft={n_fft}"))
    if hop <= 0:
        raise RuntimeError(named(f"stft: expected hop_length > 0, but got hop_length={hop}"))
    if not 0 < width <= n_fft:
        raise RuntimeError(named(f"stft: expected 0 < win_length <= n_fft, but got win_length={width}"))
    signal = reshape(input, (1, -1)) if input.ndim == 1 else input
    if center:
        if pad_mode not in ("reflect", "constant", "replicate", "circular"):
            raise NotImplementedError(named(f"stft(): pad_mode={pad_mode!r} is not supported"))
        signal = reshape(pad(reshape(signal, (signal.shape[0], 1, -1)), (n_fft // 2, n_fft // 2), mode=pad_mode),
                         (signal.shape[0], -1))
    if not 0 < n_fft <= signal.shape[-1]:
        raise RuntimeError(named(f"stft: expected 0 < n_fft < {signal.shape[-1]}, but got n_fft={n_fft}"))
    if window is None:
        warnings.warn("A window was not provided. A rectangular window will be applied,which is known to cause "
                      "spectral leakage.", UserWarning, stacklevel=2)
    else:
        if not isinstance(window, Tensor):
            raise not_tensors(window=window)
        if window.ndim != 1 or window.shape[0] != width:
            raise RuntimeError(named(f"stft: expected a 1D window tensor of size equal to win_length={width}, but "
                                     f"got window with size {list(window.shape)}"))
    frames = unfold(signal, -1, n_fft, hop)                     # (batch, frames, n_fft)
    if window is not None or width < n_fft:
        from corenn.tensor.creation import ones
        weights = window if window is not None else ones(width, dtype=input.dtype, device=input.device)
        left = (n_fft - width) // 2                              # a shorter window sits in the middle
        frames = frames * pad(weights.to(input.dtype), (left, n_fft - width - left))
    sided = True if onesided is None else bool(onesided)
    frequencies = n_fft // 2 + 1 if sided else n_fft
    cosines, sines = _dft_matrices(n_fft, frequencies, input)
    real, imaginary = matmul(frames, cosines), -matmul(frames, sines)   # (batch, frames, frequencies)
    result = stack([real, imaginary], -1).transpose(1, 2)              # (batch, frequencies, frames, 2)
    if normalized:
        result = result / math.sqrt(n_fft)
    return result[0] if input.ndim == 1 else result


__all__ = ["stft"]
