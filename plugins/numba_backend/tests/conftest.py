"""Tests of corenn-numba: they need the plugin installed (pip install -e plugins/numba_backend)."""
import os

import pytest

pytest.importorskip("numba", reason="corenn-numba needs numba")
corenn_numba = pytest.importorskip("corenn_numba", reason="corenn-numba is not installed")

# The compiled kernels wherever they handle the inputs, whatever the timings (see tests/conftest.py);
# test_calibration.py switches modes itself.
os.environ.setdefault("CORENN_NUMBA_CHOOSE", "kernel")
from corenn_numba import calibration  # noqa: E402

calibration.set_mode(os.environ["CORENN_NUMBA_CHOOSE"])
