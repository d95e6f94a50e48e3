"""The int8 kernels: every implementation equals the numpy one bit for bit, and checks its inputs."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import corenn
from corenn import nn
import corenn_quantize as Q
from corenn_quantize import kernels

RNG = np.random.default_rng(18)

numba_kernels = pytest.importorskip("corenn_quantize.numba_kernels")
# "portable" is the same packed layout and tiles in plain vector IR, for CPUs without VNNI.
COMPILED = ["vnni", "portable"] if numba_kernels.VNNI else ["portable"]


@pytest.fixture
def use(monkeypatch):
    """``use(name)`` switches this process to the ``numpy``, ``portable`` or ``vnni`` kernels for the test."""
    def switch(name):
        monkeypatch.setattr(kernels, "_numba_kernels", False if name == "numpy" else numba_kernels)
        monkeypatch.setattr(kernels, "_use_vnni", name == "vnni")
    return switch


def random_shapes(count):
    # odd K and N that are not multiples of 4 or 16, single rows, rows that are not whole tiles
    shapes = [(1, 1, 1), (1, 10, 2048), (3, 17, 5), (4, 16, 4), (5, 33, 7), (9, 130, 1027), (64, 2048, 784)]
    for _ in range(count):
        shapes.append(tuple(int(v) for v in (RNG.integers(1, 70), RNG.integers(1, 200), RNG.integers(1, 700))))
    return shapes


def operands(m, n, k):
    xq = RNG.integers(0, 256, (m, k)).astype(np.uint8)
    wq = RNG.integers(-128, 128, (n, k)).astype(np.int8)
    scales = (RNG.random(n) * 1e-3).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    return xq, wq, scales, bias


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_products_equal_numpy_bit_for_bit(name, use):
    for index, (m, n, k) in enumerate(random_shapes(25)):
        xq, wq, scales, bias = operands(m, n, k)
        bias = bias if index % 2 else None
        zero_point = int(RNG.integers(0, 256))
        use("numpy")
        weights = kernels.LinearWeights(wq)
        want = kernels.linear_dequantized(xq, zero_point, weights, scales, bias)
        want_q = kernels.linear_requantized(xq, zero_point, weights, scales, bias, 0.05, 7, relu=index % 3 == 0)
        use(name)
        weights = kernels.LinearWeights(wq)
        exact = (xq.astype(np.int64) @ wq.T.astype(np.int64) - zero_point * wq.sum(1, dtype=np.int64))
        np.testing.assert_array_equal(kernels.linear_dequantized(xq, zero_point, weights,
                                                                 np.ones(n, np.float32), None),
                                      exact.astype(np.float32))
        np.testing.assert_array_equal(kernels.linear_dequantized(xq, zero_point, weights, scales, bias), want)
        np.testing.assert_array_equal(
            kernels.linear_requantized(xq, zero_point, weights, scales, bias, 0.05, 7, relu=index % 3 == 0), want_q)


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_dynamic_linear_equals_numpy_bit_for_bit(name, use):
    for m, n, k in random_shapes(15):
        _, wq, scales, bias = operands(m, n, k)
        x = (RNG.standard_normal((m, k)) * 3 + RNG.standard_normal()).astype(np.float32)
        use("numpy")
        xq, x_scale, x_zero_point = kernels.quantize_rows_dynamic(x)
        want = kernels.linear_dequantized(xq, x_zero_point, kernels.LinearWeights(wq),
                                          scales * np.float32(x_scale), bias)
        use(name)
        assert kernels.quantize_rows_dynamic(x)[1:] == (x_scale, x_zero_point)
        np.testing.assert_array_equal(kernels.quantize_rows_dynamic(x)[0], xq)
        np.testing.assert_array_equal(kernels.linear_dynamic(x, kernels.LinearWeights(wq), scales, bias), want)


@pytest.mark.parametrize("name", COMPILED)
def test_serial_and_parallel_kernels_agree(name, use, monkeypatch):
    use(name)
    xq, wq, scales, bias = operands(37, 150, 301)
    x = RNG.standard_normal((37, 301)).astype(np.float32)
    weights = kernels.LinearWeights(wq)
    monkeypatch.setattr(kernels, "PARALLEL_MIN_MACS", 1 << 62)
    serial = kernels.linear_requantized(xq, 3, weights, scales, bias, 0.02, 100)
    serial_dynamic = kernels.linear_dynamic(x, weights, scales, bias)
    monkeypatch.setattr(kernels, "PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(kernels, "threads", kernels.ThreadChooser(trials=2))
    for _ in range(6):  # timing both ways, then the chosen one
        np.testing.assert_array_equal(kernels.linear_requantized(xq, 3, weights, scales, bias, 0.02, 100), serial)
        np.testing.assert_array_equal(kernels.linear_dynamic(x, weights, scales, bias), serial_dynamic)
    assert set(kernels.threads.choices().values()) <= {True, False} and len(kernels.threads.choices()) == 2


def test_thread_chooser_times_both_then_keeps_the_faster_until_a_recheck():
    chooser = kernels.ThreadChooser(trials=2, recheck=3)
    seen = []
    for seconds in (1.0, 0.5, 1.2, 0.4):      # serial, parallel, serial, parallel
        parallel = chooser.parallel("shape")
        seen.append(parallel)
        chooser.record("shape", parallel, seconds)
    assert seen == [False, True, False, True] and chooser.choices() == {"shape": True}
    assert [chooser.parallel("shape") for _ in range(3)] == [True, True, True]
    assert chooser.choices() == {"shape": None}  # measured again after `recheck` calls


def test_vnni_packing_layout():
    wq = RNG.integers(-128, 128, (21, 10)).astype(np.int8)
    packed = numba_kernels.pack_vnni(wq)
    assert packed.shape == (2, 3, 64)
    for n in range(21):
        for k in range(10):
            assert packed[n // 16, k // 4, 4 * (n % 16) + k % 4] == wq[n, k]
    assert not packed[1, :, 4 * 5:].any() and not packed[:, 2, 2::4].any() and not packed[:, 2, 3::4].any()


@pytest.mark.parametrize("name", COMPILED)
def test_tiles_compile_to_the_dot_product_instructions(name):
    import numba
    tile = numba_kernels._vnni_tile if name == "vnni" else numba_kernels._portable_tile
    probe = numba.njit(tile.py_func)  # not cached, so that its assembly can be read
    xq, wq, _, _ = operands(4, 64, 16)
    packed, acc = numba_kernels.pack_vnni(wq), np.empty(16 * 4 * 4, np.int32)
    probe(xq, 0, 4, packed, 0, 4, acc)
    np.testing.assert_array_equal(acc.reshape(4, 64), xq.astype(np.int32) @ wq.T.astype(np.int32))
    assembly = probe.inspect_asm(probe.signatures[0])
    if name == "vnni":
        assert "vpdpbusd" in assembly
    elif numba_kernels.VNNI:  # the plain IR still finds the 16-bit multiply-adds on this CPU
        assert "vpdpwssd" in assembly or "vpmaddwd" in assembly


def test_kernels_refuse_bad_inputs(use):
    use(COMPILED[0])
    xq, wq, scales, bias = operands(4, 20, 9)
    weights = kernels.LinearWeights(wq)
    with pytest.raises(RuntimeError, match="expected uint8"):
        kernels.linear_dequantized(xq.astype(np.int8), 0, weights, scales, bias)
    with pytest.raises(RuntimeError, match="expected uint8"):
        kernels.linear_dequantized(xq[:, :8], 0, weights, scales, bias)
    with pytest.raises(RuntimeError, match="float32 scales"):
        kernels.linear_dequantized(xq, 0, weights, scales[:3], bias)
    with pytest.raises(RuntimeError, match="float32 bias"):
        kernels.linear_dequantized(xq, 0, weights, scales, bias.astype(np.float64))
    with pytest.raises(TypeError, match="LinearWeights"):
        kernels.linear_dequantized(xq, 0, wq, scales, bias)
    with pytest.raises(TypeError, match="2-d int8"):
        kernels.LinearWeights(wq.astype(np.int16))
    with pytest.raises(RuntimeError, match="float32"):
        kernels.linear_dynamic(xq, weights, scales, bias)
    # The compiled drivers check what the wrapper passes them, whoever calls them.
    out = np.empty((4, 20), np.float32)
    packed, padded = weights.packed(), kernels._padded_activations(xq)
    for kind in COMPILED:
        product = getattr(numba_kernels, f"{kind}_dequantized")
        with pytest.raises(ValueError, match="inconsistent shapes"):
            product(padded[:, :8], 4, packed, 20, weights.sums, np.int32(0), (scales, bias), out)
        with pytest.raises(ValueError, match="inconsistent shapes"):
            product(padded, 4, packed, 40, weights.sums, np.int32(0), (scales, bias), out)
        with pytest.raises(ValueError, match="inconsistent shapes"):
            product(padded[:3], 4, packed, 20, weights.sums, np.int32(0), (scales, bias), out)
        with pytest.raises(ValueError, match="inconsistent shapes"):
            product(padded, 4, packed, 20, weights.sums[:5], np.int32(0), (scales, bias), out)
        with pytest.raises(ValueError, match="C-contiguous"):
            product(np.zeros((4, 24), np.uint8)[:, ::2], 4, packed, 20, weights.sums, np.int32(0), (scales, bias),
                    out)
        with pytest.raises(Exception, match="expected uint8 activations"):  # refused when it compiles
            product(padded.astype(np.float32), 4, packed, 20, weights.sums, np.int32(0), (scales, bias), out)


def mlp():
    corenn.manual_seed(0)
    return nn.Sequential(nn.Linear(37, 50), nn.ReLU(), nn.Linear(50, 10)).eval()


@pytest.mark.parametrize("name", ["numpy"] + COMPILED)
def test_packed_weights_survive_save_load_and_deepcopy(name, use, tmp_path):
    use(name)
    model = mlp()
    int8 = Q.quantize_dynamic(model, {nn.Linear}, dtype=corenn.qint8)
    x = corenn.randn(5, 37)
    want = int8(x).numpy()
    path = tmp_path / "int8.safetensors"
    corenn.save(int8.state_dict(), str(path))
    fresh = Q.quantize_dynamic(nn.Sequential(nn.Linear(37, 50), nn.ReLU(), nn.Linear(50, 10)).eval(), {nn.Linear},
                               dtype=corenn.qint8)
    assert not np.array_equal(fresh(x).numpy(), want)
    fresh.load_state_dict(corenn.load(str(path)))
    np.testing.assert_array_equal(fresh(x).numpy(), want)  # the packed layout is derived from what was loaded
    np.testing.assert_array_equal(copy.deepcopy(int8)(x).numpy(), want)
    assert set(int8.state_dict()) == {f"{i}.{key}" for i in (0, 2) for key in
                                      ("packed_weight", "packed_weight_scales", "packed_weight_zero_points",
                                       "packed_bias")}
