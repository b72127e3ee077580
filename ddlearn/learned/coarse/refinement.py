r"""The refinement of the learned coarse space: a block Krylov Rayleigh–Ritz step on the spectral
pencil that finishes the network's start vectors, and the training loss on its Ritz values.

Per overlapping subdomain :math:`i` the spectral coarse space
(:mod:`ddlearn.classical.coarse.spectral`) wants the :math:`k` smallest eigenpairs of
:math:`A_i^N v = \lambda B_i v`, :math:`B_i = D_iA_i^RD_i`. From :math:`m` start vectors
:math:`X_i` (:mod:`.starts`)

.. math::

    \mathcal K_s = \mathrm{span}\{X_i,\ TX_i,\ \dots,\ T^sX_i\},\quad T = M_i^{-1}B_i,

    V_i = \text{the } k \text{ Ritz vectors of } (A_i^N, B_i) \text{ on } \mathcal K_s
    \text{ with the smallest Ritz values},

with :math:`M_i = A_i^N+\varepsilon\,|\mathrm{diag}A_i^N|` (one sparse Cholesky/LU per
subdomain, the same pencil as the spectral space; :class:`~.patches.PatchBatch` factors it).
The coarse vectors are :math:`R_i^TD_iV_i` and the coarse operator is Galerkin, so the
preconditioner is SPD for every start; the start (the network's, :mod:`.network`) only decides
how good the subspace is.

*Training* (:mod:`.local_training`): label-free, on the Ritz values after the refinement,

.. math:: L(\theta) = \frac{1}{|\mathcal P|}\sum_{i\in\mathcal P}\sum_{j\le k}
          \frac{\tilde\lambda_{i,j}(\theta) - \lambda_{i,j}}{\lambda_{i,k+1}} \;\ge 0,

(:math:`\tilde\lambda`: Ritz values, :math:`\lambda`: exact), which measures the eigenvalue
error in units of the gap CG sees, :math:`\sqrt{1/\lambda_{k+1}}`; a missed channel mode
(:math:`\lambda\approx10^{-7}`) costs a whole unit. Everything here is differentiable in the
start vectors (the products with :math:`B_i` and :math:`M_i^{-1}` are fixed sparse operators in
the autograd graph).
"""
from __future__ import annotations

import numpy as np
import torch

from .network import SparseProduct
from .patches import PatchBatch

__all__ = ["refine", "refine_checked", "ritz_loss"]


class _Solve(torch.autograd.Function):
    r""":math:`M^{-1}Y` with a factored symmetric :math:`M` (backward: :math:`M^{-1}` again)."""

    @staticmethod
    def forward(ctx, Y, lu):
        ctx.lu = lu
        return torch.from_numpy(lu.solve(Y.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(ctx.lu.solve(grad.numpy().copy())), None


def _krylov(batch: PatchBatch, X: torch.Tensor, steps: int) -> list[torch.Tensor]:
    r"""Per subdomain an orthonormal basis of :math:`\mathcal K_s = \mathrm{span}\{X, TX,
    \dots, T^sX\}`, :math:`T = M^{-1}B` applied to all subdomains at once (differentiable in
    :math:`X`)."""
    bases = [[torch.linalg.qr(x)[0]] for x in batch.split(X)]
    for _ in range(steps):
        current = torch.cat([b[-1] for b in bases])
        Y = _Solve.apply(SparseProduct.apply(current, batch.B), batch.lu)
        for basis, y in zip(bases, batch.split(Y)):
            Q = torch.cat(basis, dim=1)
            y = y - Q @ (Q.T @ y)
            y = y - Q @ (Q.T @ y)  # twice is enough (Kahan)
            basis.append(torch.linalg.qr(y)[0])
    return [torch.cat(b, dim=1) for b in bases]


def _ritz(batch: PatchBatch, S: list[torch.Tensor]):
    r"""Per subdomain the Ritz values (ascending) and coefficient vectors of
    :math:`A^Nv=\lambda Bv` on :math:`\mathrm{span}\,S_i`, solved as
    :math:`G_My = \nu(G_M+G_B)y`, :math:`\lambda = \nu/(1-\nu)`: :math:`G_M+G_B` stays
    positive definite when either Gram matrix is singular (floating subdomains)."""
    width = max(s.shape[1] for s in S)
    padded = torch.cat([torch.nn.functional.pad(s, (0, width - s.shape[1])) for s in S])
    MS, BS = (batch.split(SparseProduct.apply(padded, A)) for A in (batch.M, batch.B))
    out = []
    for s, ms, bs in zip(S, MS, BS):
        r = s.shape[1]
        GM, GB = s.T @ ms[:, :r], s.T @ bs[:, :r]
        GM, GB = (GM + GM.T) / 2, (GB + GB.T) / 2
        L = torch.linalg.cholesky(GM + GB)
        C = torch.linalg.solve_triangular(
            L, torch.linalg.solve_triangular(L, GM, upper=False).T, upper=False)
        nu, Y = torch.linalg.eigh((C + C.T) / 2)
        nu = nu.clamp(max=1 - 1e-15)
        out.append((nu / (1 - nu), s @ torch.linalg.solve_triangular(L.T, Y, upper=True)))
    return out


def refine(batch: PatchBatch, X, steps: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per subdomain ``(lambda, V)``: the ``k`` smallest Ritz pairs on the block Krylov space
    of its start vectors (rows of the stacked ``X``); see the module docstring."""
    return refine_checked(batch, X, steps, k)[0]


def refine_checked(batch: PatchBatch, X, steps: int, k: int):
    r"""``(pairs, change)``: :func:`refine`'s pairs and, per subdomain, what the last Krylov
    step changed in its Ritz values, in units of the largest kept one,

    .. math:: \Delta_i = \sum_{j\le k}\big(\tilde\lambda^{(s-1)}_{ij}
              - \tilde\lambda^{(s)}_{ij}\big) / \tilde\lambda^{(s)}_{ik} \;\ge 0

    (the spaces are nested, so Ritz values only decrease; 0 for ``steps = 0``). It estimates
    the loss of :func:`ritz_loss` one step earlier without the exact eigenvalues: a converged
    refinement changes nothing, a start that missed a low mode (a channel's) finds it late and
    changes a whole unit."""
    with torch.no_grad():
        X = torch.as_tensor(X, dtype=torch.float64)
        S = _krylov(batch, X, steps)
        pairs = [(lam[:k].numpy(), V[:, :k].numpy()) for lam, V in _ritz(batch, S)]
        change = np.zeros(len(batch))
        if steps and len(batch):
            before = _ritz(batch, [b[:, :X.shape[1] * steps] for b in S])
            for i, ((lam, _), (old, _)) in enumerate(zip(pairs, before)):
                old = old[:len(lam)].numpy()
                change[i] = float(np.sum(old - lam) / max(lam[-1], 1e-300))
    return pairs, change


def ritz_loss(batch: PatchBatch, X: torch.Tensor, exact: list[np.ndarray], steps: int, k: int):
    r""":math:`\frac1{|P|}\sum_i\sum_{j\le k}(\tilde\lambda_{ij}-\lambda_{ij})/\lambda_{i,k+1}`
    (the module docstring); ``exact[i]`` holds the ``k + 1`` smallest exact eigenvalues of
    subdomain ``i``."""
    total = 0.0
    for (ritz, _), lam in zip(_ritz(batch, _krylov(batch, X, steps)), exact):
        total = total + (ritz[:k] - torch.from_numpy(np.asarray(lam[:k]))).sum() / float(lam[k])
    return total / len(batch)
