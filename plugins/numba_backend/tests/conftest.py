"""Tests of corenn-numba: they need the plugin installed (pip install -e plugins/numba_backend)."""
import pytest

pytest.importorskip("numba", reason="corenn-numba needs numba")
corenn_numba = pytest.importorskip("corenn_numba", reason="corenn-numba is not installed")
