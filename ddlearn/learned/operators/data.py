r"""Training data of the paper: Fourier right-hand sides and their exact solutions.

1D: :math:`f(x) = \sum_{k=1}^{K} a_k \sin(k\pi x)`; 2D:
:math:`f(x, y) = \sum_{k,l=1}^{K} a_{kl}\sin(k\pi x)\sin(l\pi y)`, with independent
:math:`a \sim \mathcal N(0, 1)\cdot k^{-p}` (2D: :math:`(k^2+l^2)^{-p/2}`), ``K`` modes and spectral
decay ``p``. Targets :math:`u = A^{-1}f` come from one sparse LU factorisation of ``A``; nothing
here forms a dense inverse.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

__all__ = ["fourier_rhs", "Dataset", "Splits", "make_splits", "ExactSolver"]


def fourier_rhs(problem, count: int, modes: int, decay: float = 0.0,
                rng: np.random.Generator | None = None, rows=None) -> np.ndarray:
    """``count`` random Fourier right-hand sides, shape ``(count, n)``, or only their entries
    at the natural indices ``rows`` (shape ``(count, len(rows))``): every rank draws the same
    coefficients and evaluates its own rows, so distributed data equals serial data."""
    if modes < 1:
        raise ValueError(f"modes must be at least 1, got {modes}")
    rng = np.random.default_rng(0) if rng is None else rng
    rows = np.arange(problem.n) if rows is None else np.asarray(rows)
    k = np.arange(1, modes + 1)
    # Grid index of each row along each direction (x fastest), then the sine table there.
    sub = np.unravel_index(rows, problem.grid[::-1])[::-1]
    S = [np.sin(np.pi * np.outer((i + 1) / (m + 1), k)) for i, m in zip(sub, problem.grid)]
    if problem.dim == 1:
        a = rng.standard_normal((count, modes)) * k ** (-float(decay))
        return a @ S[0].T
    if problem.dim == 2:
        kk = np.hypot(k[:, None], k[None, :])
        a = rng.standard_normal((count, modes, modes)) * kk ** (-float(decay))
        # f[c, row] = sum_{k,l} a[c, l, k] sin(k pi x_row) sin(l pi y_row)
        return np.einsum("clk,rl,rk->cr", a, S[1], S[0])
    kk = np.sqrt(k[:, None, None] ** 2 + k[None, :, None] ** 2 + k[None, None, :] ** 2)
    a = rng.standard_normal((count, modes, modes, modes)) * kk ** (-float(decay))
    # f[c, row] = sum_{k,l,m} a[c, m, l, k] sin(k pi x_row) sin(l pi y_row) sin(m pi z_row)
    return np.einsum("cmlk,rm,rl,rk->cr", a, S[2], S[1], S[0])


class ExactSolver:
    """``u = A^{-1} f`` for many right-hand sides from one sparse LU factorisation."""

    def __init__(self, A: sp.spmatrix):
        self.lu = spla.splu(sp.csc_matrix(A))

    def __call__(self, F: np.ndarray) -> np.ndarray:
        """Solve for the rows of ``F`` (shape ``(count, n)``)."""
        return self.lu.solve(np.ascontiguousarray(np.asarray(F, dtype=np.float64).T)).T


@dataclass
class Dataset:
    """Pairs ``(f, u = A^{-1} f)`` as tensors of shape ``(count, n)``."""

    F: torch.Tensor
    U: torch.Tensor

    def __len__(self):
        return self.F.shape[0]

    def to(self, dtype) -> "Dataset":
        return Dataset(self.F.to(dtype), self.U.to(dtype))


@dataclass
class Splits:
    train: Dataset
    val: Dataset
    test: Dataset
    meta: dict


def make_splits(problem, n_train: int = 1024, n_val: int = 128, n_test: int = 256,
                modes: int = 64, decay: float = 0.0, seed: int = 0,
                dtype=torch.float64, rows=None, solve=None) -> Splits:
    """Fixed-seed train, validation and test sets (disjoint random draws).

    Serially (default) the sets hold whole vectors and ``u = A^{-1}f`` comes from one sparse LU.
    A distributed caller passes its ``rows`` (natural indices, in its PETSc order) and a
    ``solve`` that maps its rows of ``F`` to its rows of ``A^{-1}F``
    (:class:`ddlearn.learned.operators.distributed.PetscExactSolver`); the data are then the serial data's rows.
    """
    rng = np.random.default_rng(seed)
    solve = ExactSolver(problem.matrix()) if solve is None else solve
    sets = []
    for count in (n_train, n_val, n_test):
        F = fourier_rhs(problem, count, modes, decay, rng, rows)
        sets.append(Dataset(torch.from_numpy(F).to(dtype), torch.from_numpy(solve(F)).to(dtype)))
    meta = {"modes": modes, "decay": decay, "seed": seed, "n_train": n_train, "n_val": n_val,
            "n_test": n_test}
    return Splits(*sets, meta=meta)
