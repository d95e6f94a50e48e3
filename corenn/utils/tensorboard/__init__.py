"""``corenn.utils.tensorboard``: write TensorBoard event files, as ``torch.utils.tensorboard`` does.

:class:`SummaryWriter` has PyTorch's constructor and ``add_*`` methods. It is built on the ``tensorboard``
package (its protobufs and its event file writer), which corenn does not require: install it with
``pip install 'corenn[tensorboard]'``. Importing this module without it raises ImportError saying so.

Example::

    >>> from corenn.utils.tensorboard import SummaryWriter
    >>> with SummaryWriter("runs/demo") as writer:          # doctest: +SKIP
    ...     for step in range(3):
    ...         writer.add_scalar("loss", 1.0 / (step + 1), step)
"""
try:
    import tensorboard  # noqa: F401  (only checks that the optional dependency is there)
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "corenn.utils.tensorboard needs the tensorboard package, which is not installed: "
        "pip install 'corenn[tensorboard]' (or pip install tensorboard)") from error

from corenn.utils.tensorboard.writer import FileWriter, SummaryWriter

__all__ = ["FileWriter", "SummaryWriter"]
