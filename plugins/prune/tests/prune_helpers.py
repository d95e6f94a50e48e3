"""Building the same pruned modules in PyTorch (the oracle) and corenn, with the same weights."""
from __future__ import annotations

import numpy as np

import corenn


def to_corenn(tensor, **kwargs):
    return corenn.tensor(tensor.detach().numpy().copy(), **kwargs)


def to_numpy(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def copy_weights(torch_module, corenn_module) -> None:
    """Give ``corenn_module`` the parameters and buffers of ``torch_module`` (the same architecture)."""
    corenn_module.load_state_dict({key: to_corenn(value) for key, value in torch_module.state_dict().items()})


def twin_layers(torch, kind: str, seed: int = 0, values=None):
    """(torch layer, corenn layer) of ``kind`` with equal weights; ``values`` replaces the weight (ties)."""
    torch.manual_seed(seed)
    if kind == "linear":
        t = torch.nn.Linear(12, 7)
        c = corenn.nn.Linear(12, 7)
    elif kind == "conv":
        t = torch.nn.Conv2d(3, 6, 3)
        c = corenn.nn.Conv2d(3, 6, 3)
    else:
        raise ValueError(kind)
    if values is not None:
        with torch.no_grad():
            t.weight.copy_(torch.as_tensor(np.asarray(values, dtype=np.float32).reshape(t.weight.shape)))
    copy_weights(t, c)
    return t, c
