"""``DistributedDataParallel``: one model per rank, gradients averaged over the ranks during backward.

How a step goes (as in PyTorch's DDP):

1. At construction, rank 0's parameters and buffers are broadcast to every rank, after
   checking that every rank has the same parameter names, shapes and dtypes (an error
   names the first rank and parameter that differ). Parameters are put into buckets of
   about ``bucket_cap_mb`` (the first one 1 MB, so communication starts early), in the
   reverse order of ``module.parameters()`` -- roughly the order backward produces them.
2. ``forward`` runs the module (and broadcasts buffers from rank 0 first, with
   ``broadcast_buffers=True``).
3. During ``backward``, each parameter's post-accumulate-grad hook marks it ready; when
   every parameter of a bucket is ready, the bucket's gradients are copied into one flat
   buffer and its all-reduce starts, non-blocking, while backward goes on. Buckets start
   in the same order on every rank (bucket i waits for buckets before it), so the ranks'
   collectives always match.
4. When the last bucket has started, DDP waits for them all and writes the averaged
   gradients back into ``.grad`` -- all before ``loss.backward()`` returns.

``no_sync()`` skips 3-4 (gradients accumulate locally). With
``find_unused_parameters=True`` the graph is searched after forward and parameters it
does not reach are marked ready at once; without it, a parameter that got no gradient
makes the next ``forward`` raise RuntimeError naming it (a reduction never finished).
"""
from __future__ import annotations

import contextlib
import time
import weakref

import corenn
import corenn.nn as nn
from corenn_distributed import distributed_c10d as dist
from corenn_distributed.backend import Work

__all__ = ["DistributedDataParallel", "GradBucket"]

_FIRST_BUCKET_BYTES = 1024 * 1024  # PyTorch's first bucket: small, so the first all-reduce starts soon


class GradBucket:
    """What a communication hook gets: one bucket's gradients, flattened into one tensor.

    ``buffer()`` is the flat tensor (this rank's gradients, to be reduced), ``index()`` the
    bucket's number (0 starts first), ``parameters()`` / ``gradients()`` the bucket's
    parameters and their gradients, ``is_last()`` whether it is the last bucket of the step.

    Example::

        def hook(state, bucket: GradBucket):
            work = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True)
            return work.then(lambda w: w.value()[0])
    """

    def __init__(self, index: int, buffer, parameters, is_last: bool):
        self._index, self._buffer, self._parameters, self._is_last = index, buffer, parameters, is_last

    def index(self) -> int:
        return self._index

    def buffer(self):
        return self._buffer

    def set_buffer(self, buffer) -> None:
        self._buffer = buffer

    def parameters(self) -> list:
        return list(self._parameters)

    def gradients(self) -> list:
        return [p.grad for p in self._parameters]

    def is_last(self) -> bool:
        return self._is_last


class _Bucket:
    __slots__ = ("index", "params", "offsets", "numel", "buffer", "waiting", "work")

    def __init__(self, index, params, dtype):
        self.index, self.params = index, params
        self.offsets, total = [], 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        self.numel = total
        self.buffer = corenn.zeros(total, dtype=dtype, device=params[0].device)
        self.waiting = len(params)
        self.work: Work | None = None


class _GradReadyHook:
    """The post-accumulate-grad hook on each parameter: tells its DDP (held weakly) that the gradient is ready.

    A deep copy of the wrapped module (``copy.deepcopy(ddp.module)``, common for an EMA or
    a reference model) copies the parameters' hooks too: a copy is inert, as the copied
    parameters belong to no DDP.
    """

    def __init__(self, ddp):
        self._ddp = weakref.ref(ddp) if ddp is not None else (lambda: None)

    def __call__(self, param) -> None:
        ddp = self._ddp()
        if ddp is not None and ddp._expecting:
            ddp._mark_ready(param)

    def __deepcopy__(self, memo):
        return _GradReadyHook(None)

    def __reduce__(self):
        return (_GradReadyHook, (None,))


class DistributedDataParallel(nn.Module):
    """Data parallelism over the ranks of a process group (``torch.nn.parallel.DistributedDataParallel``).

    Each rank runs ``module`` on its own part of the batch; ``loss.backward()`` leaves
    every rank with the gradient averaged over all ranks, so the same optimizer step
    keeps the replicas identical. ``device_ids``/``output_device`` are accepted for
    PyTorch's signature (the module stays on its device). ``bucket_cap_mb`` sizes the
    gradient buckets (25 by default). ``gradient_as_bucket_view=True`` makes each
    ``.grad`` a view into its bucket after a synchronised step instead of a copy.

    Example::

        dist.init_process_group("mpi")
        model = DistributedDataParallel(nn.Linear(10, 1))
        optimizer = corenn.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:                      # a DistributedSampler gives each rank its share
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()   # gradients averaged over the ranks here
            optimizer.step()
    """

    def __init__(self, module: nn.Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False, init_sync: bool = True):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DistributedDataParallel(): module must be a corenn.nn.Module, got "
                            f"{type(module).__name__}")
        dist._require_init("DistributedDataParallel")
        group = dist._group(process_group, "DistributedDataParallel")
        if group is None:
            raise ValueError("DistributedDataParallel(): this rank is not a member of process_group")
        if bucket_cap_mb is not None and bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel(): bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.module = module
        object.__setattr__(self, "process_group", group)
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.device_ids, self.output_device, self.dim = device_ids, output_device, dim
        self.require_backward_grad_sync = True
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)

        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                               "requires a gradient.")
        object.__setattr__(self, "_param_names", [name for name, _ in named])
        object.__setattr__(self, "_params", [p for _, p in named])
        self._verify_same_parameters()
        if init_sync:
            self._broadcast([p for p in self._params] + [b for _, b in module.named_buffers()])
        object.__setattr__(self, "_buckets", self._make_buckets())
        object.__setattr__(self, "_bucket_of", {})
        for bucket in self._buckets:
            for slot, p in enumerate(bucket.params):
                self._bucket_of[id(p)] = (bucket, slot)
        ready_hook = _GradReadyHook(self)
        object.__setattr__(self, "_hook_handles", [
            p.register_post_accumulate_grad_hook(ready_hook) for p in self._params])
        object.__setattr__(self, "_comm_hook", None)
        object.__setattr__(self, "_comm_state", None)
        # Per step: whether a reduction is expected, what is ready, the next bucket to start.
        object.__setattr__(self, "_expecting", False)
        object.__setattr__(self, "_ready", set())
        object.__setattr__(self, "_next_bucket", 0)
        object.__setattr__(self, "_locally_used", None)
        object.__setattr__(self, "timeline", {})

    # -- construction ---------------------------------------------------------------------------------------------
    def _verify_same_parameters(self) -> None:
        mine = [(name, tuple(p.shape), str(p.dtype)) for name, p in zip(self._param_names, self._params)]
        everyone = [None] * self.process_group.size
        dist.all_gather_object(everyone, mine, group=self.process_group)
        ranks = dist._State.groups[self.process_group]
        for rank, theirs in enumerate(everyone):
            if theirs == mine:
                continue
            for position in range(max(len(mine), len(theirs))):
                a = mine[position] if position < len(mine) else None
                b = theirs[position] if position < len(theirs) else None
                if a != b:
                    raise RuntimeError(
                        f"DistributedDataParallel(): the model differs between ranks: parameter {position} is "
                        f"{a} on rank {dist.get_rank()} but {b} on rank {ranks[rank]} (every rank must build the "
                        "same model)")

    def _broadcast(self, tensors) -> None:
        """Rank 0's values into ``tensors`` on every rank, one broadcast per dtype (coalesced)."""
        root = dist._State.groups[self.process_group][0]
        by_dtype: dict = {}
        for t in tensors:
            by_dtype.setdefault((t.dtype, t.device), []).append(t)
        for (dtype, device), group in by_dtype.items():
            flat = corenn.cat([t.detach().reshape(-1) for t in group]) if len(group) > 1 else \
                group[0].detach().reshape(-1).clone()
            dist.broadcast(flat, root, group=self.process_group)
            offset = 0
            with corenn.no_grad():
                for t in group:
                    t.copy_(flat[offset:offset + t.numel()].reshape(t.shape))
                    offset += t.numel()

    def _make_buckets(self) -> list[_Bucket]:
        buckets, current, size, cap = [], [], 0, min(_FIRST_BUCKET_BYTES, self.bucket_bytes_cap)
        for p in reversed(self._params):
            nbytes = p.numel() * p.element_size()
            if current and (size + nbytes > cap or p.dtype != current[0].dtype or p.device != current[0].device):
                buckets.append(_Bucket(len(buckets), current, current[0].dtype))
                current, size, cap = [], 0, self.bucket_bytes_cap
            current.append(p)
            size += nbytes
        if current:
            buckets.append(_Bucket(len(buckets), current, current[0].dtype))
        return buckets

    def bucket_sizes(self) -> list[int]:
        """How many parameters each bucket holds, in the order the buckets start."""
        return [len(b.params) for b in self._buckets]

    # -- the step --------------------------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self._expecting:
            self._raise_unfinished()
        syncing = corenn.is_grad_enabled() and self.require_backward_grad_sync and self.training
        if self.broadcast_buffers and self.require_backward_grad_sync and self.process_group.size > 1:
            buffers = [b for _, b in self.module.named_buffers()]
            if buffers:
                self._broadcast(buffers)
        output = self.module(*inputs, **kwargs)
        if syncing:
            object.__setattr__(self, "_expecting", True)
            object.__setattr__(self, "_ready", set())
            object.__setattr__(self, "_next_bucket", 0)
            object.__setattr__(self, "timeline", {"bucket_started": [], "forward_end": time.perf_counter()})
            for bucket in self._buckets:
                bucket.waiting, bucket.work = len(bucket.params), None
            if self.find_unused_parameters:
                reached = self._reached_parameters(output)
                object.__setattr__(self, "_locally_used", [id(p) in reached for p in self._params])
                for p in self._params:
                    if id(p) not in reached:
                        self._mark_ready(p)
        return output

    def _reached_parameters(self, output) -> set:
        """ids of the parameters the autograd graph of ``output`` reaches (PyTorch's unused-parameter search)."""
        reached, nodes, stack = set(), [], [output]
        while stack:
            item = stack.pop()
            if isinstance(item, corenn.Tensor):
                if item.grad_fn is not None:
                    nodes.append(item.grad_fn)
                elif item.requires_grad:
                    reached.add(id(item))   # the output is a parameter itself
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
        seen = set()
        while nodes:
            node = nodes.pop()
            for next_node, _ in getattr(node, "next_functions", ()):
                if next_node is None:
                    continue
                variable = getattr(next_node, "variable", None)
                if variable is not None:
                    reached.add(id(variable))
                elif id(next_node) not in seen:
                    seen.add(id(next_node))
                    nodes.append(next_node)
        return reached

    def _mark_ready(self, param) -> None:
        if id(param) in self._ready:
            return
        self._ready.add(id(param))
        if "first_ready" not in self.timeline:
            self.timeline["first_ready"] = time.perf_counter()
        bucket, _ = self._bucket_of[id(param)]
        bucket.waiting -= 1
        # Buckets start in index order on every rank, so the ranks' all-reduces match one to one.
        while self._next_bucket < len(self._buckets) and self._buckets[self._next_bucket].waiting == 0:
            self._start_bucket(self._buckets[self._next_bucket])
            object.__setattr__(self, "_next_bucket", self._next_bucket + 1)
        if self._next_bucket == len(self._buckets):
            self.timeline["all_ready"] = time.perf_counter()
            self._finalize()

    def _start_bucket(self, bucket: _Bucket) -> None:
        flat = bucket.buffer
        if self.process_group.size == 1 and self._comm_hook is None:
            self.timeline["bucket_started"].append(time.perf_counter())
            return   # the average over one rank is the gradient itself: nothing to copy or send
        if flat.device.type == "cpu":   # numpy copies: a tenth of the cost of corenn ops per parameter
            array = flat.numpy()
            for p, offset in zip(bucket.params, bucket.offsets):
                grad = p.grad
                if grad is None:
                    array[offset:offset + p.numel()] = 0
                else:
                    array[offset:offset + p.numel()] = grad.detach().numpy().reshape(-1)
        else:
            with corenn.no_grad():
                for p, offset in zip(bucket.params, bucket.offsets):
                    view = flat[offset:offset + p.numel()]
                    if p.grad is None:
                        view.zero_()
                    else:
                        view.copy_(p.grad.reshape(-1))
        self.timeline["bucket_started"].append(time.perf_counter())
        grad_bucket = GradBucket(bucket.index, flat, bucket.params, bucket.index == len(self._buckets) - 1)
        if self._comm_hook is None:
            bucket.work = dist.all_reduce(flat, group=self.process_group, async_op=True)
        else:
            bucket.work = self._comm_hook(self._comm_state, grad_bucket)
            if not isinstance(bucket.work, Work):
                raise TypeError(f"DistributedDataParallel: the communication hook returned a "
                                f"{type(bucket.work).__name__}, expected the Work of an async_op=True collective "
                                "(optionally .then(...))")

    def _finalize(self) -> None:
        start = time.perf_counter()
        size = self.process_group.size
        globally_used = None
        if self.find_unused_parameters:
            used = corenn.tensor([1 if u else 0 for u in self._locally_used], dtype=corenn.int32)
            dist.all_reduce(used, op=dist.ReduceOp.MAX, group=self.process_group)
            globally_used = {id(p) for p, u in zip(self._params, used.tolist()) if u}
        for bucket in self._buckets:
            if bucket.work is None:   # one rank, no hook: the gradients are already the average
                continue
            bucket.work.wait()
            if self._comm_hook is None:
                result = bucket.buffer
                if result.device.type == "cpu":
                    result.numpy()[...] /= size
                    if not self.gradient_as_bucket_view and (globally_used is None or
                                                             all(id(p) in globally_used for p in bucket.params)):
                        self._copy_back_numpy(bucket, result.numpy())
                        continue
                else:
                    with corenn.no_grad():
                        result.div_(size)
            else:
                result = bucket.work.value()
                if not isinstance(result, corenn.Tensor) or result.numel() != bucket.numel:
                    raise RuntimeError(f"DistributedDataParallel: the communication hook's result for bucket "
                                       f"{bucket.index} must be a tensor of {bucket.numel} elements, got {result!r}")
                result = result.reshape(-1)
            with corenn.no_grad():
                for p, offset in zip(bucket.params, bucket.offsets):
                    if globally_used is not None and id(p) not in globally_used:
                        continue   # no rank used it: its .grad stays as it was, as in PyTorch
                    averaged = result[offset:offset + p.numel()].reshape(p.shape)
                    if self.gradient_as_bucket_view and result is bucket.buffer:
                        p.grad = averaged
                    elif p.grad is None:
                        p.grad = averaged.clone()
                    else:
                        p.grad.copy_(averaged)
        object.__setattr__(self, "_expecting", False)
        now = time.perf_counter()
        self.timeline["finalized"] = now
        self.timeline["wait_s"] = now - start

    @staticmethod
    def _copy_back_numpy(bucket: _Bucket, array) -> None:
        for p, offset in zip(bucket.params, bucket.offsets):
            averaged = array[offset:offset + p.numel()].reshape(tuple(p.shape))
            grad = p.grad
            if grad is None:
                p.grad = corenn.from_numpy(averaged.copy())
            else:
                target = grad.detach().numpy()
                if target.flags.writeable:
                    target[...] = averaged
                else:
                    with corenn.no_grad():
                        grad.copy_(corenn.from_numpy(averaged))

    def _raise_unfinished(self) -> None:
        missing = [(i, name) for i, (name, p) in enumerate(zip(self._param_names, self._params))
                   if id(p) not in self._ready]
        object.__setattr__(self, "_expecting", False)
        rank = dist.get_rank()
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a new one. This error "
            "indicates that your module has parameters that were not used in producing loss (or that backward "
            "was not called after a forward in training mode). You can enable unused parameter detection by "
            "passing the keyword argument `find_unused_parameters=True` to DistributedDataParallel, or run "
            "forward under corenn.no_grad() / model.eval() when no backward follows.\n"
            f"Parameters which did not receive grad for rank {rank}: {', '.join(name for _, name in missing)}\n"
            f"Parameter indices which did not receive grad for rank {rank}: {' '.join(str(i) for i, _ in missing)}")

    # -- user controls ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        """Inside the block, backward accumulates gradients locally without communication.

        The first forward-backward after the block synchronises the accumulated gradients::

            with model.no_sync():
                model(x1).sum().backward()      # local only
            model(x2).sum().backward()          # averaged: (grad1 + grad2) over the ranks
        """
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state, hook) -> None:
        """Replace the bucket all-reduce by ``hook(state, bucket) -> Work`` whose ``value()`` is the reduced buffer.

        ``corenn.distributed.algorithms.ddp_comm_hooks.default_hooks`` has ``allreduce_hook`` and
        ``fp16_compress_hook`` (halves the bytes sent). Register before the first backward, once.

        Example::

            from corenn.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        """
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook can only be called once.")
        if not callable(hook):
            raise TypeError(f"register_comm_hook(): hook must be callable, got {type(hook).__name__}")
        object.__setattr__(self, "_comm_hook", hook)
        object.__setattr__(self, "_comm_state", state)

    def join(self, *args, **kwargs):
        raise NotImplementedError("DistributedDataParallel.join (uneven inputs) is not implemented in corenn; give "
                                  "every rank the same number of batches (DistributedSampler does)")

    def __del__(self):
        for handle in getattr(self, "_hook_handles", ()):
            handle.remove()

