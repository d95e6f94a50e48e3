"""Switches for gradient recording: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Each works as a context manager and as a decorator, as in PyTorch. The flag lives in
:mod:`corenn.autograd.node` so that the per-op hot path reads one module global.
"""
from __future__ import annotations

import functools
import inspect

from corenn.autograd import node as _node

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "is_inference_mode_enabled"]


def is_grad_enabled() -> bool:
    """Whether ops on tensors that require grad record a graph."""
    return _node.GRAD_ENABLED


def is_inference_mode_enabled() -> bool:
    return _node.INFERENCE_MODE


class _GradModeContext:
    """Base for the grad-mode switches: sets a mode on enter, restores the previous one on exit."""

    enabled = False

    def __enter__(self):
        self._previous = _node.GRAD_ENABLED
        _node.GRAD_ENABLED = self.enabled
        return None

    def __exit__(self, *exc):
        _node.GRAD_ENABLED = self._previous
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
        self._previous = _node.GRAD_ENABLED
        _node.GRAD_ENABLED = self.enabled

    def __enter__(self):
        return None

    def __call__(self, func):
        # Used as a decorator: undo the immediate effect of __init__; apply per call instead.
        _node.GRAD_ENABLED = self._previous
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
        self._previous = _node.GRAD_ENABLED
        self._previous_inference = _node.INFERENCE_MODE
        if self.mode:
            _node.GRAD_ENABLED = False
            _node.INFERENCE_MODE = True
        return None

    def __exit__(self, *exc):
        _node.GRAD_ENABLED = self._previous
        _node.INFERENCE_MODE = self._previous_inference
        return False

    def clone(self):
        return inference_mode(self.mode)
