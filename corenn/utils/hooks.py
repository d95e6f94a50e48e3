"""Removable handles for registered hooks (mirrors ``torch.utils.hooks.RemovableHandle``)."""
from __future__ import annotations

import itertools
import weakref

__all__ = ["RemovableHandle"]


class RemovableHandle:
    """Returned by every ``register_*`` call: ``handle.remove()`` unregisters the hook.

    Also a context manager, so a hook can be active for one block::

        with module.register_forward_hook(record):
            module(x)
    """

    _ids = itertools.count()

    def __init__(self, hooks_dict: dict, *, extra_dicts=()):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.extra_dict_refs = tuple(weakref.ref(d) for d in extra_dicts)
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_refs):
            hooks = ref()
            if hooks is not None:
                hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def __repr__(self):
        return f"<RemovableHandle id={self.id}>"
