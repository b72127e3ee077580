"""What the operator-learning models and the learned coarse spaces share: the reader of saved
torch payloads, the best-state rule of training, the progress bar and the cosine learning-rate
schedule (they write their files through :mod:`ddlearn.decomposition.atomic`)."""
from __future__ import annotations

import copy
import math

import torch
from tqdm.auto import tqdm

__all__ = ["read_payload", "BestState", "progress_bar", "cosine_schedule"]


def read_payload(path: str, fmt: str, version: int, what: str) -> dict:
    """The dict saved at ``path``, checked to carry ``format == fmt`` and ``version``.

    Raises
    ------
    ValueError
        For a truncated or foreign file, another format or another version, naming ``what``.
    """
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise ValueError(f"{path} is not a readable {what} ({e})") from e
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        raise ValueError(f"{path} is not a {what}")
    if payload.get("version") != version:
        raise ValueError(f"{path} has {what} version {payload.get('version')}; this ddlearn "
                         f"reads version {version}")
    return payload


class BestState:
    """The best evaluated state of a module seen so far: lower ``value`` is better and a tie
    keeps the earlier state (the best-state rule both trainers follow)."""

    def __init__(self, module, value: float = math.inf, step: int = 0, state=None):
        self.module, self.value, self.step = module, value, step
        self.state = copy.deepcopy(module.state_dict() if state is None else state)

    def offer(self, value: float, step: int) -> bool:
        """Keep the module's current state if ``value`` beats the best; returns whether it did."""
        if not value < self.value:
            return False
        self.value, self.step = value, step
        self.state = copy.deepcopy(self.module.state_dict())
        return True

    def restore(self) -> None:
        self.module.load_state_dict(self.state)


def progress_bar(show: bool, total: int, desc: str, comm=None, initial: int = 0):
    """A tqdm bar on rank 0 of ``comm`` when ``show`` (``None`` elsewhere): one bar per run,
    not one per rank."""
    if not show or (comm is not None and comm.Get_rank() != 0):
        return None
    return tqdm(total=total, initial=initial, desc=desc, unit="step", leave=False)


def cosine_schedule(lr: float, lr_final: float, steps: int):
    r"""The factor of the learning rate at step :math:`k` (for ``LambdaLR``):
    :math:`\rho + (1-\rho)\tfrac12(1+\cos(\pi\min(k, B)/B))`, :math:`\rho` =
    ``lr_final / lr``, :math:`B` = ``steps``."""
    ratio = lr_final / lr
    return lambda k: ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * min(k, steps) / steps))
