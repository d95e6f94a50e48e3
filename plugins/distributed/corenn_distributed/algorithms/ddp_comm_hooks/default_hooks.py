"""The default DDP communication hooks (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``).

A hook is ``hook(state, bucket) -> Work``: it starts reducing ``bucket.buffer()`` and
returns a Work whose ``value()`` is the averaged flat gradient. ``state`` is the process
group to use (None: the DDP's group is the default group).

Example::

    from corenn.distributed.algorithms.ddp_comm_hooks import default_hooks
    model.register_comm_hook(None, default_hooks.fp16_compress_hook)
"""
from __future__ import annotations

import corenn
from corenn_distributed import distributed_c10d as dist

__all__ = ["allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"]


def allreduce_hook(process_group, bucket):
    """Average the bucket over the ranks: divide by the world size, then all-reduce (what DDP does without a hook)."""
    group = process_group if process_group is not None else dist.GroupMember.WORLD
    buffer = bucket.buffer()
    with corenn.no_grad():
        buffer.div_(dist.get_world_size(group))
    work = dist.all_reduce(buffer, group=group, async_op=True)
    return work.then(lambda _: buffer)


def fp16_compress_hook(process_group, bucket):
    """Send the bucket as float16 (half the bytes), average, and give it back in the bucket's dtype.

    Gradients lose precision to float16 rounding (about 3 decimal digits) and overflow
    above 65504; the result is decompressed into the bucket's buffer.
    """
    return _compressed(process_group, bucket, corenn.float16)


def bf16_compress_hook(process_group, bucket):
    """As :func:`fp16_compress_hook`, in bfloat16 where corenn has it (else TypeError)."""
    bfloat16 = getattr(corenn, "bfloat16", None)
    if bfloat16 is None:
        raise TypeError("bf16_compress_hook(): corenn has no bfloat16 dtype; use fp16_compress_hook")
    return _compressed(process_group, bucket, bfloat16)


def _compressed(process_group, bucket, dtype):
    group = process_group if process_group is not None else dist.GroupMember.WORLD
    buffer = bucket.buffer()
    with corenn.no_grad():
        compressed = buffer.to(dtype) / dist.get_world_size(group)
    work = dist.all_reduce(compressed, group=group, async_op=True)

    def decompress(_):
        with corenn.no_grad():
            buffer.copy_(compressed)
        return buffer
    return work.then(decompress)
