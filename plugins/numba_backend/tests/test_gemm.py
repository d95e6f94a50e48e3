"""corenn_numba._gemm_jit: the microkernel against numpy, its typing errors, and its AVX2 configuration."""
import os
import pathlib
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba.core.errors import TypingError

from corenn_numba import _gemm_jit as gemm


@numba.njit
def _call(a_panel, b_data, b_rows, b_start, tile, depth):
    gemm.microkernel(a_panel, b_data, b_rows, b_start, tile, depth)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [0, 1, 37])
def test_microkernel_computes_a_packed_tile_with_rows_read_in_place(dtype, depth):
    rng = np.random.default_rng(0)
    columns, rows = gemm.nr(dtype), gemm.MR
    a = rng.standard_normal((rows, depth)).astype(dtype)
    source = rng.standard_normal(5 + depth * 3 * columns).astype(dtype)
    b_rows = (np.arange(depth) * 3 * columns).astype(np.int64)[::-1].copy()  # B's rows anywhere in source
    b = np.stack([source[5 + r:5 + r + columns] for r in b_rows]) if depth else np.zeros((0, columns), dtype)
    tile = np.full(rows * columns, np.nan, dtype=dtype)
    _call(np.ascontiguousarray(a.T).reshape(-1), source, b_rows, 5, tile, depth)
    np.testing.assert_allclose(tile.reshape(rows, columns), a @ b, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_microkernel_rejects_mixed_or_integer_dtypes_by_name():
    rows = np.zeros(1, dtype=np.int64)
    with pytest.raises(TypingError, match="float32 or float64 arrays of one dtype"):
        _call(np.zeros(8, np.float32), np.zeros(32, np.float64), rows, 0, np.zeros(256, np.float32), 1)
    with pytest.raises(TypingError, match="float32 or float64 arrays of one dtype"):
        _call(np.zeros(8, np.int32), np.zeros(32, np.int32), rows, 0, np.zeros(256, np.int32), 1)
    with pytest.raises(TypingError, match="index arrays must be int64"):
        _call(np.zeros(8), np.zeros(32), rows.astype(np.int32), 0, np.zeros(256), 1)


@numba.njit
def _call_store(a_panel, b_data, b_rows, depth, out, out_start, row_stride, rows, runs, run_count, row_bias):
    return gemm.microkernel_store(a_panel, b_data, b_rows, 0, depth, out, out_start, row_stride, rows, runs,
                                  run_count, row_bias)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 5, gemm.MR])
def test_microkernel_store_writes_runs_of_the_tile_with_row_bias_and_nothing_else(dtype, rows):
    columns, depth = gemm.nr(dtype), 7
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((gemm.MR, depth)).astype(dtype)
    b = rng.standard_normal((depth, columns)).astype(dtype)
    bias = rng.standard_normal(gemm.MR).astype(dtype)
    expected_tile = a @ b + bias[:, None]
    row_stride = 50
    out = np.full(gemm.MR * row_stride, -7.0, dtype=dtype)
    # Tile columns 1 .. 1+half (across the two registers) to the very start of each row (the store's base lies
    # before it), column half+1 skipped, the rest to offset 20: masked stores that start mid-register.
    half = columns // 2
    runs = np.array([1, 0, half, half + 2, 20, half - 2], dtype=np.int64)
    assert _call_store(np.ascontiguousarray(a.T).reshape(-1), b.reshape(-1), np.arange(depth) * columns, depth, out,
                       0, row_stride, rows, runs, 2, bias) is True  # every stored value finite
    expected = np.full_like(out, -7.0)
    for i in range(rows):
        start = i * row_stride
        expected[start:start + half] = expected_tile[i, 1:1 + half]
        expected[start + 20:start + 20 + half - 2] = expected_tile[i, half + 2:]
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("where, stored", [("column skipped", False), ("column stored", True),
                                           ("row past rows", False)])
def test_microkernel_store_says_whether_what_it_stored_is_finite(where, stored):
    # An inf in a tile column no run stores, or in a row past ``rows``, is computed but not stored.
    columns, depth, rows = gemm.nr(np.float32), 4, gemm.MR - 1
    half = columns // 2
    row, column = {"column skipped": (0, half - 1), "column stored": (0, 1), "row past rows": (gemm.MR - 1, 2)}[where]
    a = np.ones((gemm.MR, depth), np.float32)
    b = np.ones((depth, columns), np.float32)
    a[row, 0], b[0, column] = 1e30, 1e30  # their product overflows float32: inf in one tile entry
    runs = np.array([0, 0, half - 1, half, half, columns - half], dtype=np.int64)
    out = np.zeros(gemm.MR * columns, np.float32)
    finite = _call_store(np.ascontiguousarray(a.T).reshape(-1), b.reshape(-1), np.arange(depth) * columns, depth, out,
                         0, columns, rows, runs, 2, np.zeros(gemm.MR, np.float32))
    assert finite is (not stored)
    assert np.isfinite(out).all() == finite


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels, lanes", [(20, 8), (20, 32), (7, 8), (16, 6), (64, 64)])
@pytest.mark.parametrize("cropped", [False, True])
def test_put_on_grid_lays_channels_out_as_the_reference_does(dtype, channels, lanes, cropped):
    # 8 x 8 blocks are transposed in registers; leftover channels and columns (and 6-channel lanes, AVX2's MR)
    # element by element; a cropped view (rows and columns sliced off) has strided rows.
    rng = np.random.default_rng(channels)
    whole = rng.standard_normal((channels, 13, 21)).astype(dtype)
    planes = whole[:, 1:12, 2:19] if cropped else whole
    height, width = planes.shape[1:]
    top, left, width_p = 2, 1, width + 3
    blocks = -(-channels // lanes)
    buffer = np.zeros((blocks, (height + 4) * width_p * lanes), dtype)
    gemm._put_on_grid(planes, buffer, lanes, top, left, width_p)
    expected = np.zeros_like(buffer)
    for k in range(channels):
        for y in range(height):
            for x in range(width):
                expected[k // lanes, ((y + top) * width_p + x + left) * lanes + k % lanes] = planes[k, y, x]
    np.testing.assert_array_equal(buffer, expected)


@pytest.mark.parametrize("last_rows", [gemm.PARTIAL_ROWS - 1, gemm.PARTIAL_ROWS + 1])
def test_pack_weight_lays_rows_out_in_microkernel_order(last_rows):
    # 2 groups, a full block and a partial one: laid out for the partial-block kernel when it is short enough.
    rows, depth = gemm.MR + last_rows, 3
    weight = np.arange(2 * rows * depth, dtype=np.float32).reshape(2, rows, depth) + 1
    panels = gemm.pack_weight(weight)
    assert panels.shape == (2, 2, depth * gemm.MR)
    blocks = panels.reshape(2, 2, depth, gemm.MR)
    np.testing.assert_array_equal(blocks[1, 0, 2, :], weight[1, :gemm.MR, 2])
    tile_rows = gemm.PARTIAL_ROWS if last_rows <= gemm.PARTIAL_ROWS < gemm.MR else gemm.MR
    last = panels[:, 1, :depth * tile_rows].reshape(2, depth, tile_rows)
    np.testing.assert_array_equal(last[:, :, :last_rows], weight[:, gemm.MR:].transpose(0, 2, 1))
    assert not last[:, :, last_rows:].any() and not panels[:, 1, depth * tile_rows:].any()  # padding rows: zero


AVX2_ONLY = "+avx,+avx2,+fma,+sse4.2,+popcnt,+f16c,+bmi,+bmi2"


def test_the_avx2_configuration_gives_the_same_results(tmp_path):
    # Machines without AVX-512 get 6-row tiles of 256-bit vectors: compile for such a CPU here (its own
    # numba cache) and run the microkernel's and the convolution's edge tests there. On an AVX2-only host
    # the rest of the suite already runs that configuration natively, so this re-run (the suite's longest
    # test: every kernel it touches compiled again) would add nothing.
    import llvmlite.binding as llvm
    host = llvm.get_host_cpu_features().flatten()
    if not all(f"+{feature}" in host for feature in ("avx2", "fma")):
        pytest.skip("the host cannot run AVX2 code")
    if gemm.MR == 6:
        pytest.skip("this host has no AVX-512: the whole suite already ran the AVX2 configuration")
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": AVX2_ONLY,
           "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    here = pathlib.Path(__file__).parent
    probe = subprocess.run([sys.executable, "-c", "from corenn_numba import _gemm_jit as g; print(g.MR, g.nr('float32'))"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert probe.stdout.split() == ["6", "16"], probe.stderr
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here / "test_gemm.py"),
                            str(here / "test_conv.py"), "-k", "microkernel or tile_edges or put_on_grid or winograd", "--deselect",
                            f"{here / 'test_gemm.py'}::test_the_avx2_configuration_gives_the_same_results"],
                           env=env, capture_output=True, text=True, timeout=900)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
