"""Removable handles for registered hooks (mirrors ``torch.utils.hooks.RemovableHandle``)."""
from __future__ import annotations

import weakref

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """Returned by every ``register_*`` call: ``handle.remove()`` unregisters the hook.

    Also a context manager, so a hook can be active for one block::

        with module.register_forward_hook(record):
            module(x)

    A handle pickles and deep-copies together with the hooks dict it points into, as
    PyTorch's does: ``copy.deepcopy((module, handle))`` gives a handle that removes the
    hook from the copied module, so state that keeps handles (a pruning method keeps the
    handle of its forward pre-hook) survives ``copy.deepcopy`` and pickling.

    Example::

        >>> import copy
        >>> m = nn.Identity()
        >>> handle = m.register_forward_pre_hook(lambda module, args: None)
        >>> m_copy, handle_copy = copy.deepcopy((m, handle))
        >>> handle_copy.remove()               # the copy's hook goes, the original's stays
        >>> len(m._forward_pre_hooks), len(m_copy._forward_pre_hooks)
        (1, 0)
    """

    # the id of the next handle: ids are keys of the hooks dicts, so they never repeat in a process,
    # also after unpickling handles made elsewhere (__setstate__ moves it past their ids)
    next_id: int = 0

    def __init__(self, hooks_dict: dict, *, extra_dicts=()):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.extra_dict_refs = tuple(weakref.ref(d) for d in extra_dicts)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_refs):
            hooks = ref()
            if hooks is not None:
                hooks.pop(self.id, None)

    def __getstate__(self):
        # The dicts themselves (weak references do not pickle); pickle and deepcopy share them
        # with the module they belong to through their memo.
        return self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_refs)

    def __setstate__(self, state) -> None:
        hooks_dict, self.id, extra_dicts = state
        # A dict that was already gone when the handle was saved: the handle removes nothing.
        self.hooks_dict_ref = weakref.ref(hooks_dict) if hooks_dict is not None else (lambda: None)
        self.extra_dict_refs = tuple(weakref.ref(d) if d is not None else (lambda: None) for d in extra_dicts)
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def __repr__(self):
        return f"<RemovableHandle id={self.id}>"
