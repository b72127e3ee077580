r"""Data-aware initialisation of the learned operators from the training pairs ``(f_b, u_b)``.

Every linear model here acts on rows, :math:`u^T = f^T W` with :math:`W = M^T`. Fitting the
*squared relative* error :math:`\sum_b \|Mf_b-u_b\|^2/\|u_b\|^2` (the square of the training loss)
is least squares on the rows scaled by :math:`1/\|u_b\|`: :math:`\tilde F, \tilde U`.

- :class:`~ddlearn.nn.operators.GlobalAttention` (:math:`W = KQ^T`): reduced-rank
  regression. :math:`Q` spans the dominant right singular subspace of the least-squares fit
  :math:`\hat U = P_{\tilde F}\tilde U` (a randomized range finder with power iterations,
  Halko–Martinsson–Tropp 2011), then :math:`K = \arg\min_K \|\tilde F K Q^T - \tilde U\|_F
  = \tilde F^+ \tilde U Q`.
- :class:`~ddlearn.nn.operators.SchwarzAttention`: the coarse block first,
  :math:`\min \|\tilde F\Phi K_0Q_0^T\Phi^T - \tilde U\|_F` (rank :math:`r_0`), then every local
  block on the residual :math:`E = \tilde U - \text{coarse}`: block :math:`i` sees
  :math:`x_i = D_i^{1/2}R_i\tilde f` and is fitted to :math:`y_i = D_i^{1/2}R_i e` (rank
  :math:`r_\ell`), so that if every block fits exactly,
  :math:`\sum_i R_i^TD_i^{1/2}y_i = \sum_i R_i^TD_iR_i e = e` (partition of unity).
- FLARE / FLARE++ (nonlinear in their parameters): the least-squares output scale
  :math:`s \leftarrow \alpha s`, :math:`\alpha = \langle Mf,u\rangle/\langle Mf,Mf\rangle`.

The fits are deterministic for a given ``seed`` (the range finder's Gaussian sketch).
"""
from __future__ import annotations

import numpy as np
import torch

from ...nn.operators import FLARE, GlobalAttention, SchwarzAttention

__all__ = ["range_finder", "reduced_rank_fit", "data_init"]


def range_finder(Y: np.ndarray, rank: int, oversample: int = 10, power: int = 2,
                 seed: int = 0) -> np.ndarray:
    r"""Orthonormal basis :math:`V\in\mathbb R^{n\times r}` of the dominant right singular
    subspace of ``Y`` (shape ``(m, n)``): sketch :math:`Z = Y^T\Omega`,
    :math:`\Omega\in\mathbb R^{m\times(r+p)}` Gaussian, ``power`` re-orthonormalised power
    iterations :math:`Z \leftarrow Y^TYZ`, then the top ``rank`` right singular vectors of
    :math:`YZ` in the sketched basis. ``rank`` beyond the numerical rank gives arbitrary
    orthonormal completions."""
    m, n = Y.shape
    if not 1 <= rank <= n:
        raise ValueError(f"rank {rank} must lie in [1, {n}]")
    k = min(n, rank + oversample)
    Z = np.linalg.qr(Y.T @ np.random.default_rng(seed).standard_normal((m, k)))[0]
    for _ in range(power):
        Z = np.linalg.qr(Y.T @ (Y @ Z))[0]
    _, _, Vt = np.linalg.svd(Y @ Z, full_matrices=False)
    return Z @ Vt[:rank].T


def reduced_rank_fit(X: np.ndarray, Y: np.ndarray, rank: int, seed: int = 0):
    r"""``(K, Q)`` with :math:`Y \approx XKQ^T`, :math:`K, Q \in\mathbb R^{n\times r}`:
    :math:`Q` = :func:`range_finder` of the least-squares fit :math:`\hat Y = P_XY`
    (:math:`P_X` the orthogonal projector onto the columns of ``X``),
    :math:`K = X^+YQ` (minimum-norm least squares). This is reduced-rank regression, exact
    when the range finder is."""
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows and Y {Y.shape[0]}: one row per sample")
    Ux, s, _ = np.linalg.svd(X, full_matrices=False)
    Ux = Ux[:, s > s[0] * max(X.shape) * np.finfo(float).eps]
    Q = range_finder(Ux @ (Ux.T @ Y), rank, seed=seed)
    K = np.linalg.lstsq(X, Y @ Q, rcond=None)[0]
    return K, Q


def _relative_rows(data):
    """Training rows scaled by ``1 / ||u_b||`` (float64 numpy)."""
    F, U = data.F.double().numpy(), data.U.double().numpy()
    w = 1.0 / np.linalg.norm(U, axis=1, keepdims=True)
    return F * w, U * w


@torch.no_grad()
def _init_global(model: GlobalAttention, F, U, seed):
    K, Q = reduced_rank_fit(F, U, model.config["rank"], seed)
    model.K.copy_(torch.from_numpy(K))
    model.Q.copy_(torch.from_numpy(Q))


@torch.no_grad()
def _init_schwarz(model: SchwarzAttention, F, U, seed, sweeps):
    # Block Gauss-Seidel (backfitting): each block in turn is the exact rank-constrained
    # least-squares fit of the residual of all the others, E + (its own contribution).
    model.Q.zero_()
    model.K.zero_()
    sqrtD = model.sqrtD.double().numpy()
    subs = model.dec.subdomains
    local = [np.zeros((F.shape[0], len(I))) for I in subs]
    coarse = np.zeros_like(U)
    E = U.copy()
    if not model.one_level:
        # min ||F Phi X Phi^T - T||: with Phi^T Phi = L L^T it is min ||(F Phi) X L - T Phi L^-T||
        # over X L, a reduced-rank regression; then K_0 Q_0^T = X.
        Phi = model.Phi_sp.toarray()
        L = np.linalg.cholesky(Phi.T @ Phi)
    for sweep in range(sweeps):
        if not model.one_level:
            T = E + coarse
            K0, Qt = reduced_rank_fit(F @ Phi, np.linalg.solve(L, (T @ Phi).T).T, model.r0, seed)
            model.K0.copy_(torch.from_numpy(K0))
            model.Q0.copy_(torch.from_numpy(np.linalg.solve(L.T, Qt)))     # L^{-T} Q'
            coarse = ((F @ Phi) @ K0) @ (Phi @ model.Q0.double().numpy()).T
            E = T - coarse
        for i, I in enumerate(subs):
            # Block i adds (x_i K_i Q_i^T) D_i^{1/2} on the rows I_i, x_i = f_I D_i^{1/2}:
            # fit (x_i, T_I) by reduced-rank regression to (K, Q') and set Q_i = D_i^{-1/2} Q'.
            d = sqrtD[i, :len(I)]
            T = E[:, I] + local[i]
            K, Q = reduced_rank_fit(F[:, I] * d, T, int(model.ranks[i]), seed + 1 + i)
            local[i] = (F[:, I] * d) @ K @ Q.T
            E[:, I] = T - local[i]
            model.K[i, :len(I), :K.shape[1]] = torch.from_numpy(K)
            model.Q[i, :len(I), :Q.shape[1]] = torch.from_numpy(Q / d[:, None])


@torch.no_grad()
def _init_flare(model: FLARE, F, U):
    pred = model(torch.from_numpy(F).to(model.scale.dtype)).double().numpy()
    model.scale.mul_(float((pred * U).sum() / (pred * pred).sum()))


def data_init(model, data, seed: int = 0, sweeps: int = 3):
    """Initialise ``model`` in place from the training pairs ``data`` (a
    :class:`~ddlearn.learned.operators.data.Dataset`) as the module docstring describes; returns it.

    ``sweeps``: block Gauss-Seidel sweeps over the coarse and local blocks of a Schwarz model
    (each block refitted to the residual of the others; the relative least-squares error never
    increases from sweep to sweep). Raises ``ValueError`` for symmetric models (:math:`K = Q`,
    not a least-squares problem) and ``TypeError`` for a model this module does not know."""
    if getattr(model, "K", None) is not None and model.K is model.Q:
        raise ValueError("data_init fits K and Q separately; it does not support symmetric "
                         "models (K = Q)")
    if len(data) < 1 or sweeps < 1:
        raise ValueError(f"data_init needs at least one training pair and one sweep, got "
                         f"{len(data)} pairs and sweeps = {sweeps}")
    F, U = _relative_rows(data)
    if isinstance(model, GlobalAttention):
        _init_global(model, F, U, seed)
    elif isinstance(model, SchwarzAttention):
        _init_schwarz(model, F, U, seed, sweeps)
    elif isinstance(model, FLARE):
        _init_flare(model, F, U)
    else:
        raise TypeError(f"data_init does not know {type(model).__name__}")
    return model
