"""corenn's pytest plugin: the ``corenn_plugin`` fixture, and nothing else.

pytest loads this module in every run wherever corenn is installed (entry point
``pytest11``, named ``corenn``; ``-p no:corenn`` turns it off). So it stays tiny
and imports nothing of corenn until a test asks for the fixture: installing
corenn must not change test runs that never use it (no corenn modules, no
plugins loaded, no allocator tuning). It lives outside the ``corenn`` package
because importing any ``corenn.*`` module runs ``corenn/__init__.py``, which
loads everything. The fixture's code is :func:`corenn.testing.register_plugin`.

Example::

    def test_fast_relu(corenn_plugin):
        record = corenn_plugin(FastRelu())          # registered now, removed after the test
        assert record.kernels[0].op == "relu"
"""
from __future__ import annotations

import contextlib

import pytest

__all__ = ["corenn_plugin"]


@pytest.fixture
def corenn_plugin():
    """Factory fixture: ``corenn_plugin(obj, name=None, allow_failure=False)`` registers ``obj`` for one test.

    Returns the plugin's :class:`corenn.plugins.PluginRecord`; several plugins may
    be registered in one test (they are removed in reverse order). See
    :func:`corenn.testing.register_plugin` for the arguments.

    Example::

        def test_counts_ops(corenn_plugin):
            corenn_plugin(CountingObserverPlugin())
    """
    from corenn.testing import register_plugin  # here, not at the top: see the module docstring

    with contextlib.ExitStack() as stack:
        def add(plugin, name: str | None = None, *, allow_failure: bool = False):
            return stack.enter_context(register_plugin(plugin, name, allow_failure=allow_failure))
        yield add
