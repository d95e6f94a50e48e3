"""Moving values between PyTorch (the oracle) and corenn in corenn-parametrize's tests."""
from __future__ import annotations

import numpy as np

import corenn


def to_corenn(tensor, **kwargs):
    """A corenn tensor with a torch tensor's values (bit for bit), optionally requiring grad."""
    return corenn.tensor(tensor.detach().numpy().copy(), **kwargs)


def to_numpy(tensor) -> np.ndarray:
    return tensor.detach().numpy()


def corenn_state_from_torch(state_dict) -> dict:
    return {key: to_corenn(value) for key, value in state_dict.items()}
