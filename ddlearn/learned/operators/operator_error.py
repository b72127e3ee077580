r"""Relative operator error :math:`\|M - A^{-1}\|_F / \|A^{-1}\|_F` without a dense inverse.

Columns of :math:`A^{-1}` come in blocks from one sparse LU factorisation; the model is applied
to the same block of unit vectors; only squared norms are accumulated.
"""
from __future__ import annotations

import numpy as np
import torch

from .data import ExactSolver

__all__ = ["operator_error"]


@torch.no_grad()
def operator_error(model, A, block: int = 256) -> float:
    """:math:`\\|M - A^{-1}\\|_F / \\|A^{-1}\\|_F` for a model acting on rows ``(B, n)``."""
    n = A.shape[0]
    solve = ExactSolver(A)
    dtype = next(model.parameters()).dtype
    num = den = 0.0
    for s in range(0, n, block):
        E = np.eye(n, min(block, n - s), -s).T          # rows are unit vectors e_s .. e_{s+b-1}
        exact = solve(E)
        approx = model(torch.from_numpy(E).to(dtype)).double().numpy()
        num += float(((approx - exact) ** 2).sum())
        den += float((exact ** 2).sum())
    return float(np.sqrt(num / den))
