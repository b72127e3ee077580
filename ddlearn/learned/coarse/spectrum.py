r"""What CG needs of a coarse space, differentiable: the smallest eigenvalues of the two-level
additive preconditioned operator, followed as the basis changes.

With the one-level part :math:`M_1^{-1} = \sum_i R_i^TA_i^{-1}R_i` (the Dirichlet blocks ASM
factors anyway) and the coarse basis :math:`\Phi = [R_i^TD_iV_i]_i`,

.. math:: M^{-1} = M_1^{-1} + \Phi A_0^{-1}\Phi^T,\qquad A_0 = \Phi^TA\Phi,

CG's iterations grow with :math:`\sqrt{\lambda_{\max}/\lambda_{\min}}` of :math:`M^{-1}A`, and
:math:`\lambda_{\max}` is bounded by the colouring of the subdomains whatever :math:`\Phi` is:
the coarse space decides :math:`\lambda_{\min}` and the few eigenvalues above it. The loss of
:class:`Spectrum` is

.. math:: \ell(\theta) = -\frac1p\sum_{j\le p}\log\lambda_j\big(H(\theta)\big),\qquad
          H(\theta) = X^TAM^{-1}(\theta)AX
          = Y^TM_1^{-1}Y + C^TA_0^{-1}C,\quad Y = AX,\ C = \Phi^TY,

with :math:`X` the :math:`p` smallest Ritz vectors of :math:`M^{-1}A` (A-orthonormal) from a
Lanczos run without gradient at the current :math:`\theta` (:meth:`Spectrum.ritz`): :math:`H`
is their Rayleigh–Ritz matrix, so at :math:`\theta` its eigenvalues *are* the Ritz values, and
its gradient is that of the eigenvalues themselves (Hellmann–Feynman,
:math:`d\lambda = x^TA\,dM^{-1}Ax` for an A-normalised eigenvector :math:`x`): the loss follows
the worst modes of the current preconditioner and moves them, differentiated through the
Galerkin coarse solve (measured on one matrix with a free basis, the asymptotic rate and
:math:`\lambda_{\min}` of this operator matched the spectral space where the energy after two
cycles made the basis worse than Nicolaides).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

__all__ = ["orthonormal_bases", "subspace_gap", "Spectrum"]


def orthonormal_bases(W, rtol: float = 1e-8):
    r"""``(V, fallback)``: per subdomain :math:`V_i = \mathrm{orth}[\mathbf 1, W_i]` (QR, the
    normalised constant first; ``W`` a list of ``(n_i, m)`` tensors), and the subdomains whose
    ``[1, W_i]`` is numerically rank deficient (a diagonal entry of ``R`` below ``rtol`` times
    the largest), which keep the constant alone: the partition of unity there."""
    V, fallback = [], []
    for i, w in enumerate(W):
        ones = torch.ones((w.shape[0], 1), dtype=w.dtype)
        Q, R = torch.linalg.qr(torch.cat([ones, w], dim=1))
        d = torch.diagonal(R).abs().detach()
        if not bool(torch.isfinite(d).all()) or bool((d < rtol * d.max()).any()):
            fallback.append(i)
            Q = ones / np.sqrt(w.shape[0])
        V.append(Q)
    return V, fallback


def subspace_gap(V, T) -> torch.Tensor:
    r""":math:`\frac1{\sum_i k_i}\sum_i(k_i - \|T_i^TV_i\|_F^2)`: the mean squared sine of the
    principal angles between each subdomain's orthonormal ``V_i`` and the target's orthonormal
    ``T_i`` (both ``(n_i, k_i)``), 0 where the spans agree: the curriculum of the first
    training steps (targets: the spectral space's vectors, computed offline)."""
    total = sum(v.shape[1] for v in V)
    return sum(v.shape[1] - (t.T @ v).square().sum() for v, t in zip(V, T)) / total


class Spectrum:
    r"""One matrix with its subdomains, for the loss of the module docstring.

    Parameters
    ----------
    A : scipy sparse matrix
        SPD, ``n x n``.
    sets, weights : lists of ndarray
        :math:`I_i` (sorted rows) and the diagonals of :math:`D_i`.
    """

    def __init__(self, A, sets, weights):
        self.A = sp.csr_matrix(A, dtype=np.float64)
        self.n = self.A.shape[0]
        self.sets = [np.asarray(I, dtype=np.int64) for I in sets]
        self.weights = [np.asarray(w, dtype=np.float64) for w in weights]
        self.blocks = [self.A[I][:, I].tocsc() for I in self.sets]
        self.lu = [spla.splu(b) for b in self.blocks]
        coo = self.A.tocoo()
        self.A_t = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data,
                                           coo.shape, check_invariants=False).coalesce()
        self.rows = torch.as_tensor(np.concatenate(self.sets))
        self.D_t = torch.as_tensor(np.concatenate(self.weights))

    def one_level(self, R: np.ndarray) -> np.ndarray:
        r""":math:`M_1^{-1}R = \sum_iR_i^TA_i^{-1}R_iR` for ``R`` of shape ``(n, p)``."""
        out = np.zeros_like(R)
        for I, lu in zip(self.sets, self.lu):
            out[I] += lu.solve(np.ascontiguousarray(R[I]))
        return out

    def basis(self, V) -> torch.Tensor:
        r""":math:`\Phi = [R_i^TD_iV_i]_i`, dense ``(n, n0)`` (differentiable in ``V``)."""
        cols = [v.shape[1] for v in V]
        n0 = sum(cols)
        block = torch.block_diag(*V)  # (sum n_i, n0)
        return torch.zeros((self.n, n0), dtype=block.dtype).index_add(
            0, self.rows, block * self.D_t[:, None])

    def galerkin(self, Phi: torch.Tensor) -> torch.Tensor:
        r""":math:`A_0 = \Phi^TA\Phi` (differentiable)."""
        A0 = Phi.T @ torch.sparse.mm(self.A_t, Phi)
        return (A0 + A0.T) / 2

    def ritz(self, Phi: np.ndarray, p: int, steps: int = 48, seed: int = 0):
        r"""``(values, X)``: the ``p`` smallest Ritz pairs of :math:`M^{-1}A` (``X`` A-orthonormal,
        ``(n, p)``) on the Krylov space of ``steps`` Lanczos steps from a seeded random
        vector, fully reorthogonalised in the A inner product (no gradient)."""
        A = self.A
        A0 = Phi.T @ (A @ Phi)
        c0 = sla.cho_factor((A0 + A0.T) / 2)

        def B(x):  # M^{-1} A x
            r = A @ x
            return self.one_level(r[:, None])[:, 0] + Phi @ sla.cho_solve(c0, Phi.T @ r)

        steps = min(steps, self.n)
        Q, AQ, BQ = (np.zeros((self.n, steps)) for _ in range(3))
        q = np.random.default_rng(seed).standard_normal(self.n)
        scale = None
        for j in range(steps):
            for _ in range(2):  # twice is enough (Kahan, Parlett)
                if j:
                    q = q - Q[:, :j] @ (AQ[:, :j].T @ q)
            Aq = A @ q
            norm = np.sqrt(max(q @ Aq, 0.0))
            scale = scale or norm
            if norm < 1e-12 * scale:  # an invariant subspace: the Krylov space is exhausted
                steps = j
                break
            Q[:, j], AQ[:, j] = q / norm, Aq / norm
            BQ[:, j] = B(Q[:, j])
            q = BQ[:, j].copy()
        Q, AQ, BQ = Q[:, :steps], AQ[:, :steps], BQ[:, :steps]
        T = AQ.T @ BQ
        values, S = np.linalg.eigh((T + T.T) / 2)
        return values[:p], Q @ S[:, :p]

    def ritz_matrix(self, V, X: np.ndarray) -> torch.Tensor:
        r""":math:`H = Y^TM_1^{-1}Y + C^TA_0^{-1}C`, :math:`Y = AX`, :math:`C = \Phi^TY`
        (differentiable in ``V``; ``X`` A-orthonormal)."""
        Y = self.A @ X
        H1 = torch.as_tensor(Y.T @ self.one_level(Y))
        Phi = self.basis(V)
        C = Phi.T @ torch.as_tensor(Y)
        A0 = self.galerkin(Phi)
        H = H1 + C.T @ torch.linalg.solve(A0, C)
        return (H + H.T) / 2

    def loss(self, W, p: int = 4, steps: int = 48, seed: int = 0):
        r"""``(loss, values)``: the module docstring's loss for the network's vectors ``W``
        (a list of ``(n_i, m)`` tensors) and the ``p`` smallest Ritz values (no gradient)."""
        V, _ = orthonormal_bases(W)
        with torch.no_grad():
            Phi = self.basis(V).numpy()
        values, X = self.ritz(Phi, p, steps, seed)
        lam = torch.linalg.eigvalsh(self.ritz_matrix(V, X))
        return -torch.log(lam.clamp_min(1e-300)).mean(), values
