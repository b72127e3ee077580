"""What the operator-learning models and the learned coarse spaces share: the reader of saved
torch payloads (:func:`ddlearn.nn.checkpoint.read_payload`, re-exported), the best-state rule of
training, the progress bar and the cosine learning-rate schedule (they write their files through
:mod:`ddlearn.decomposition.atomic`)."""
from __future__ import annotations

import copy
import math

from tqdm.auto import tqdm

from ..nn.checkpoint import read_payload

__all__ = ["read_payload", "BestState", "progress_bar", "cosine_schedule"]


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
