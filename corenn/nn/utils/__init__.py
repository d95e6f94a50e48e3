"""``corenn.nn.utils``: gradient clipping, flat parameter vectors, ``skip_init``, conv/linear-batch-norm fusion and
``rnn`` (packed sequences).

Example::

    >>> net = nn.Linear(3, 1)
    >>> net(corenn.randn(3)).sum().backward()
    >>> total = nn.utils.clip_grad_norm_(net.parameters(), max_norm=1.0)
"""
from corenn.nn.utils.clip_grad import (clip_grad_norm, clip_grad_norm_, clip_grad_value_,  # noqa: F401
                                       clip_grads_with_norm_, get_total_norm)
from corenn.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters  # noqa: F401
from corenn.nn.utils.fusion import (fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval,  # noqa: F401
                                    fuse_linear_bn_weights)
from corenn.nn.utils.init import skip_init  # noqa: F401
from corenn.nn.utils import rnn  # noqa: F401,E402  (pad_sequence, pack_padded_sequence, PackedSequence)

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "skip_init", "rnn", "fuse_conv_bn_eval",
           "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def __getattr__(name):
    # ``corenn.nn.utils.prune``, ``.parametrize``, ``.parametrizations``: import paths that plugins register.
    from corenn import import_paths
    return import_paths.module_getattr(__name__, name)
