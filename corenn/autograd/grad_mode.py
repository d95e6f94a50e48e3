"""Switches for gradient recording: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Each works as a context manager and as a decorator, as in PyTorch.

Grad mode is per thread, as in PyTorch: ``no_grad()`` in one thread does not stop
another thread's ops from recording, and every new thread starts with grad
enabled and inference mode off, whatever the thread that started it was in. (A
worker that should not record enters ``no_grad()`` itself.) The flags live on
:data:`corenn.autograd.node.grad_mode`, a ``threading.local``, so the per-op hot
path reads one attribute.

Example::

    >>> x = corenn.ones(2, requires_grad=True)
    >>> with corenn.no_grad():
    ...     (x * 2).requires_grad
    False
    >>> (x * 2).requires_grad
    True
    >>> @corenn.inference_mode()
    ... def predict(x):
    ...     return corenn.is_inference_mode_enabled(), (x * 2).requires_grad
    >>> predict(x)
    (True, False)
"""
from __future__ import annotations

import functools
import inspect

from corenn.autograd.node import _set_grad_enabled, grad_mode as _mode

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]


def is_grad_enabled() -> bool:
    """Whether ops on tensors that require grad record a graph, in the calling thread.

    Example::

        >>> with corenn.no_grad():
        ...     corenn.is_grad_enabled()
        False
    """
    return _mode.enabled


def is_inference_mode_enabled() -> bool:
    """Whether ``inference_mode`` is on in the calling thread.

    Example::

        >>> with corenn.inference_mode():
        ...     corenn.is_inference_mode_enabled()
        True
    """
    return _mode.inference


class _GradModeContext:
    """Base for the grad-mode switches: sets the calling thread's mode on enter, restores it on exit."""

    enabled = False

    def __enter__(self):
        self._previous = _mode.enabled
        _set_grad_enabled(self.enabled)
        return None

    def __exit__(self, *exc):
        _set_grad_enabled(self._previous)
        return False

    def __call__(self, func):
        factory = self.clone

        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def generator_wrapper(*args, **kwargs):
                generator = func(*args, **kwargs)
                value = None
                while True:
                    with factory():
                        try:
                            item = generator.send(value)
                        except StopIteration as stop:
                            return stop.value
                    value = yield item
            return generator_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with factory():
                return func(*args, **kwargs)
        return wrapper

    def clone(self):
        return type(self)()


class no_grad(_GradModeContext):
    """Disable graph recording: results of ops don't require grad.

    Example::

        with corenn.no_grad():
            y = x * 2          # y.requires_grad is False

        @corenn.no_grad()
        def evaluate(model, x): ...
    """

    enabled = False


class enable_grad(_GradModeContext):
    """Re-enable graph recording inside a ``no_grad`` region."""

    enabled = True


class set_grad_enabled(_GradModeContext):
    """Set grad mode to ``mode``. Takes effect immediately (like PyTorch), and restores on exit
    when used as a context manager."""

    def __init__(self, mode: bool):
        self.enabled = bool(mode)
        self._previous = _mode.enabled
        _set_grad_enabled(self.enabled)

    def __enter__(self):
        return None

    def __call__(self, func):
        # Used as a decorator: undo the immediate effect of __init__; apply per call instead.
        _set_grad_enabled(self._previous)
        return super().__call__(func)

    def clone(self):
        return _Deferred(self.enabled)


class _Deferred(_GradModeContext):
    def __init__(self, enabled):
        self.enabled = enabled


class inference_mode(_GradModeContext):
    """Like ``no_grad`` and marks tensors created inside as inference tensors (no version tracking
    exists to skip in corenn, so the two differ only in ``is_inference_mode_enabled``)."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self.enabled = not self.mode

    def __enter__(self):
        self._previous = _mode.enabled
        self._previous_inference = _mode.inference
        if self.mode:
            _set_grad_enabled(False)
            _mode.inference = True
        return None

    def __exit__(self, *exc):
        _set_grad_enabled(self._previous)
        _mode.inference = self._previous_inference
        return False

    def clone(self):
        return inference_mode(self.mode)
