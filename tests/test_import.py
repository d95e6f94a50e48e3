"""``import corenn`` stays light: no torch, numba or cupy, and a measured import time."""
from __future__ import annotations

import json
import subprocess
import sys

import corenn

PROBE = """
import json, sys, time
start = time.perf_counter()
import corenn
elapsed = time.perf_counter() - start
x = corenn.tensor([1.0, 2.0], requires_grad=True)
(x * x).sum().backward()
print(json.dumps({"seconds": elapsed, "grad": x.grad.tolist(),
                  "heavy": sorted(m for m in ("torch", "numba", "cupy") if m in sys.modules)}))
"""


def _probe(env_extra=None):
    import os
    env = dict(os.environ, **(env_extra or {}))
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_pulls_in_no_heavy_libraries_and_works():
    report = _probe({"CORENN_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert report["heavy"] == []
    assert report["grad"] == [2.0, 4.0]
    print(f"import corenn (no plugins): {report['seconds'] * 1000:.0f} ms")
    assert report["seconds"] < 5.0  # generous: two shared cores; the figure is printed for the report


def test_import_with_installed_plugins_pulls_in_no_heavy_libraries():
    report = _probe()
    assert report["heavy"] == []
    print(f"import corenn (with plugins): {report['seconds'] * 1000:.0f} ms, heavy modules {report['heavy']}")


def test_public_namespace():
    for name in ("tensor", "Tensor", "zeros", "ones", "randn", "float32", "no_grad", "autograd", "device",
                 "manual_seed", "matmul", "softmax", "einsum", "Size", "is_tensor"):
        assert hasattr(corenn, name), name
    assert corenn.__version__
    from corenn import ops
    assert len(ops.__all__) == len(set(ops.__all__))
    assert not any(name.startswith("_") for name in ops.__all__)
