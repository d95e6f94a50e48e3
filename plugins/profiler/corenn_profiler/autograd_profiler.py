"""``corenn.autograd.profiler``: the older ``torch.autograd.profiler`` spelling of the same profiler.

``profile(enabled=True, use_cuda=False, record_shapes=False, profile_memory=False, with_stack=False,
with_modules=False)`` records like ``corenn.profiler.profile`` (no schedule); ``record_function``
is the same class.

Example::

    with corenn.autograd.profiler.profile(record_shapes=True) as prof:
        model(x)
    print(prof.key_averages().table(sort_by="self_cpu_time_total"))
"""
from __future__ import annotations

from corenn_profiler import profiler as _profiler
from corenn_profiler.events import EventList, FunctionEvent, FunctionEventAvg
from corenn_profiler.profiler import ProfilerActivity, record_function

__all__ = ["profile", "record_function", "EventList", "FunctionEvent", "FunctionEventAvg"]


class profile(_profiler.profile):
    """``torch.autograd.profiler.profile``: ``enabled=False`` records nothing; ``use_cuda`` adds CUDA."""

    def __init__(self, enabled: bool = True, *, use_cuda: bool = False, use_device=None, record_shapes: bool = False,
                 with_flops: bool = False, profile_memory: bool = False, with_stack: bool = False,
                 with_modules: bool = False, use_kineto: bool = False, use_cpu: bool = True, **extra):
        activities = {ProfilerActivity.CPU} if use_cpu else set()
        if use_cuda or use_device == "cuda":
            activities.add(ProfilerActivity.CUDA)
        self.enabled = enabled
        super().__init__(activities=activities, record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules, **extra)

    def __enter__(self):
        if self.enabled:
            self.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.stop()
        return False

    def table(self, *args, **kwargs) -> str:
        """The events' table (``prof.table()`` in the old API)."""
        return self.events().table(*args, **kwargs)

    @property
    def function_events(self):
        return self.events()
