"""Shared test fixtures: the PyTorch oracle and hypothesis profiles sized for a small shared machine."""
from __future__ import annotations

import os

import pytest

# corenn-numba runs each kernel where it measured faster than the core (corenn_numba.calibration):
# the suite forces the compiled kernels wherever they handle the inputs, so that what it tests does
# not depend on timings (the calibration's own tests switch modes themselves). Subprocesses inherit it.
os.environ.setdefault("CORENN_NUMBA_CHOOSE", "kernel")
try:
    from corenn_numba import calibration as _numba_calibration
except ImportError:
    pass
else:
    _numba_calibration.set_mode(os.environ["CORENN_NUMBA_CHOOSE"])

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is a test extra; tests that need it import it themselves
    settings = None

if settings is not None:
    # No deadline: two cores shared by several engineers make timings meaningless.
    settings.register_profile("default", deadline=None, max_examples=25,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("quick", deadline=None, max_examples=5,
                              suppress_health_check=[HealthCheck.too_slow])
    # CI (which sets CI, as .ci/run and most CI services do) runs the README's plain
    # `python -m pytest` and gets the derandomized "ci" profile: a failure there reproduces.
    # HYPOTHESIS_PROFILE picks any profile explicitly.
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))


@pytest.fixture
def torch():
    """PyTorch as the oracle; the test is skipped where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture
def strict_device():
    """The test-only ``strict`` device (tests/strict_device), registered for one test; yields the module."""
    import strict_device as module
    from corenn.testing import register_plugin

    with register_plugin(module.StrictPlugin(), name="strict"):
        yield module


@pytest.fixture(params=["core", "numba"])
def kernels(request):
    """Run the test with the core's kernels, then with corenn-numba's (skipped where the plugin is not active)."""
    import contextlib

    import corenn
    try:
        import corenn_numba
    except ImportError:
        corenn_numba = None
    if request.param == "core":
        with corenn_numba.disabled() if corenn_numba is not None else contextlib.nullcontext():
            yield "core"
        return
    if corenn_numba is None:
        pytest.skip("corenn-numba is not installed")
    if not corenn_numba.is_enabled():
        pytest.skip(f"corenn-numba is installed but not active: {corenn.plugins.records.get('numba')}")
    yield "numba"
