"""corenn_numba._malloc: once a compiled kernel has run, a training loop's large temporaries stop faulting in fresh
pages; importing corenn alone leaves the allocator as it was."""
import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                                reason="the malloc thresholds are glibc's")

# Allocate and free 4 MB arrays the way a training step does, and count the page faults of the last 20 rounds.
PROBE = """
import json, resource
import numpy as np
import corenn, corenn_numba, corenn.nn.functional as F
from corenn_numba import _malloc
imported_tuned = _malloc.tuned
if RUN_KERNEL:
    F.softmax(corenn.randn(4, 8), dim=-1)  # the numba softmax, unless the plugin is disabled
for _ in range(5):
    arrays = [np.ones(1 << 20, dtype=np.float32) for _ in range(8)]
    del arrays
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    arrays = [np.ones(1 << 20, dtype=np.float32) for _ in range(8)]
    del arrays
print(json.dumps([imported_tuned, _malloc.tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before]))
"""


def _probe(run_kernel=True, **env):
    result = subprocess.run([sys.executable, "-c", f"RUN_KERNEL = {run_kernel}\n" + PROBE], capture_output=True,
                            text=True, timeout=300, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_compiled_kernel_keeps_freed_arrays_pages_for_the_next_ones():
    imported_tuned, tuned, faults = _probe()
    _, untouched, faults_untouched = _probe(CORENN_NUMBA_MALLOC="0")
    assert not imported_tuned and tuned and not untouched
    # 20 rounds of 8 x 4 MB: up to 160,000 fresh 4 KB pages when blocks are mapped afresh (81,000 measured
    # with glibc's defaults), next to none when the heap keeps them
    assert faults_untouched > 20_000
    assert faults < faults_untouched // 20


def test_importing_corenn_with_the_plugin_leaves_malloc_alone():
    imported_tuned, tuned, _ = _probe(run_kernel=False)
    assert not imported_tuned and not tuned


def test_a_disabled_plugin_leaves_malloc_alone():
    _, tuned, _ = _probe(CORENN_NUMBA_DISABLE="1")
    assert not tuned
