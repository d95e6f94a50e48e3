"""Fixtures of corenn-prune's tests (the plugin is installed: pip install -e plugins/prune)."""
from __future__ import annotations

import pytest


@pytest.fixture
def torch():
    """PyTorch as the oracle; the test is skipped where it is not installed."""
    return pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")
