"""Register a plugin for one test: :func:`register_plugin`, and the pytest fixture ``corenn_plugin``.

The fixture is defined in the top-level module ``_corenn_pytestplugin``, which
pytest loads by itself wherever corenn is installed (entry point ``pytest11``;
``-p no:corenn`` turns that off) and which imports corenn only when a test uses
the fixture. So in any test::

    def test_fast_relu(corenn_plugin):
        record = corenn_plugin(FastRelu())          # registered now, removed after the test
        assert record.kernels[0].op == "relu"

Outside pytest, or for a narrower scope, use the context manager::

    with corenn.testing.register_plugin(FastRelu()) as record:
        ...
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["register_plugin", "corenn_plugin"]


@contextlib.contextmanager
def register_plugin(plugin, name: str | None = None, *, allow_failure: bool = False) -> Iterator:
    """Register ``plugin`` for the ``with`` block (``corenn.plugins.register``), then unregister it.

    Yields the plugin's :class:`corenn.plugins.PluginRecord`. A plugin that fails
    to register raises :class:`corenn.plugins.PluginError` naming the cause, unless
    ``allow_failure=True`` (to test the failure itself: check ``record.status``).
    Everything the plugin registered (devices, kernels, observers, ...) is gone after
    the block, even if the block raised.

    Example::

        >>> class Info:
        ...     @corenn.hookimpl
        ...     def corenn_info_lines(self):
        ...         return ["hello"]
        >>> with register_plugin(Info()) as record:
        ...     record.status
        'active'
    """
    from corenn import plugins

    record = plugins.register(plugin, name=name)
    try:
        if record.status == "failed" and not allow_failure:
            raise plugins.PluginError(f"plugin {record.name!r} failed to register: {record.reason}")
        yield record
    finally:
        if plugins.records.get(record.name) is record:
            plugins.unregister(record.name)


try:  # the fixture, for ``from corenn.testing.plugin import corenn_plugin`` and ``pytest_plugins``
    from _corenn_pytestplugin import corenn_plugin  # noqa: F401
except ImportError:  # corenn.testing works without pytest; only the fixture needs it
    pass
