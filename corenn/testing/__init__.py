"""Testing helpers for corenn and its plugins.

- :func:`register_plugin` (context manager) and the pytest fixture ``corenn_plugin``
  (from the top-level module ``_corenn_pytestplugin``, loaded by pytest automatically
  through the ``pytest11`` entry point, which imports corenn only when a test uses the
  fixture): register a plugin object for one test, remove it after.
- :func:`assert_close`: PyTorch's ``torch.testing.assert_close`` (tolerances by dtype, the
  same messages), for tests written against PyTorch's;
- the op-conformance kit, :mod:`corenn.testing.opcheck` (``check_op``,
  ``run_conformance``, ``opcheck_params``, ...): reruns the core's op checks against
  whatever kernels are registered, on any device, comparing them with PyTorch, numpy
  references and the core's own kernels on the host, so a plugin proves its kernels
  in one line.

Example::

    from corenn.testing import register_plugin, run_conformance

    with register_plugin(MyFastKernels()):
        run_conformance(device="cpu", ops=["relu"])
"""
from __future__ import annotations

import importlib

from corenn.testing.comparison import assert_close
from corenn.testing.plugin import register_plugin

# The conformance kit's names, re-exported lazily: importing corenn.testing (which the fixture
# does) must not pay for, or break on, the op table.
_OPCHECK_NAMES = ("Float", "Index", "Mask", "Special", "OpCase", "CASES", "EXEMPT", "ConformanceError", "cases",
                  "check_op", "opcheck_params", "run_conformance", "uncovered_kernels")

__all__ = ["assert_close", "register_plugin", "opcheck", *_OPCHECK_NAMES]


def __getattr__(name):
    if name == "opcheck" or name in _OPCHECK_NAMES:
        opcheck = importlib.import_module("corenn.testing.opcheck")
        return opcheck if name == "opcheck" else getattr(opcheck, name)
    raise AttributeError(f"module 'corenn.testing' has no attribute {name!r}")
