r"""The operator-learning models: linear (or positively homogeneous) maps :math:`f\mapsto u\approx
A^{-1}f` of right-hand sides on a structured grid, built on :mod:`ddlearn.nn.kernels`.

Softmax-free attention (Köhler & Rheinbach, 2026):

- :class:`GlobalAttention`, paper eq. (7): :math:`M^{-1} = QK^T`, :math:`Q, K\in\mathbb R^{n\times r_g}`.
- :class:`SchwarzAttention`, the two-level Schwarz attention

  .. math:: M_\theta^{-1} = \Phi Q_0K_0^T\Phi^T
            + \sum_{i=1}^N R_i^T D_i^{1/2} Q_iK_i^T D_i^{1/2} R_i,
            \qquad Q_i, K_i\in\mathbb R^{n_i\times r_\ell},\ Q_0, K_0\in\mathbb R^{n_0\times r_0}.

Latent routing: :class:`FLARE` and :class:`FLAREPlusPlus` adapted to learning
:math:`f\mapsto A^{-1}f`.

Tokens are the ``n`` grid points. Token ``j`` carries fixed positional features
:math:`p_j = (x_j, \sin(2^l\pi x_j), \cos(2^l\pi x_j))_{l<L}` per coordinate; the value carried
by a token is the right-hand side :math:`f_j`. For each of ``H`` heads, keys
:math:`K_h = pW_{K,h}\in\mathbb R^{n\times d}` and ``M`` latent queries
:math:`\tilde Q_h\in\mathbb R^{M\times d}` define

.. math:: W_{enc,h} = \mathrm{softmax}_{\text{tokens}}(\tilde Q_hK_h^T/\sqrt d),\quad
          W_{dec,h} = \mathrm{softmax}_{\text{latents}}(K_h\tilde Q_h^T/\sqrt d),\quad
          u = \sum_h W_{dec,h}\,\mathrm{diag}(s_h)\,W_{enc,h}\,f,

a rank-:math:`\le HM` encode/decode (:func:`~ddlearn.nn.kernels.route`); :math:`s_h\in\mathbb
R^M` is a learned latent value scale (the only value map a scalar field admits). In **FLARE** the
queries are parameters, so the model is one fixed linear operator. **FLARE++** synthesises its
queries from the input tokens with one more encode call driven by learned seeds :math:`\hat Q_h`:
:math:`\tilde Q_h(f) = \mathrm{softmax}_{\text{tokens}}(\hat Q_h K_h'^T/\sqrt d)V_h'`, where
:math:`K_h', V_h'` are linear maps of the token features :math:`(p_j, f_j/\mathrm{rms}(f))`.
The normalisation makes FLARE++ positively homogeneous, :math:`M(\alpha f) = \alpha M(f)` for
:math:`\alpha>0`, but it is not linear in ``f``: its "operator error" is measured on unit vectors
and means less than for the linear models.

All act on batches: an input ``f`` of shape ``(..., n)`` gives ``u = M f`` of the same shape.
Every model carries ``config`` (its construction arguments, JSON-ready, ``kind`` its name in
:data:`ddlearn.nn.registry.MODELS`) so a checkpoint rebuilds an identical model.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from ..decomposition.coarse import grid_basis
from ..decomposition.structured import Decomposition, grid_coordinates
from ..decomposition.record import DecompositionRecord
from .kernels import coarse_prolong, coarse_restrict, route, schwarz_local

__all__ = ["GlobalAttention", "SchwarzAttention", "FLARE", "FLAREPlusPlus", "DTYPES",
           "check_input", "torch_dtype", "positional_features"]

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {sorted(DTYPES)}")
    return DTYPES[name]


def check_input(f: torch.Tensor, n: int) -> torch.Tensor:
    """Validate a batch of right-hand sides of length ``n``; returns it flattened to ``(B, n)``."""
    if not isinstance(f, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(f).__name__}")
    if f.ndim == 0 or f.shape[-1] != n:
        raise ValueError(f"input of shape {tuple(f.shape)} does not fit an operator on n = {n} "
                         f"unknowns: the last dimension must be {n}")
    return f.reshape(-1, n)


class GlobalAttention(nn.Module):
    r"""Global low-rank attention, paper eq. (7): :math:`u = Q(K^Tf)`.

    Parameters
    ----------
    n : int
        Number of unknowns (tokens).
    rank : int
        :math:`r_g`.
    symmetric : bool
        Use :math:`K = Q` (positive semidefinite :math:`QQ^T`).
    """

    kind = "global"

    def __init__(self, n: int, rank: int, symmetric: bool = False, dtype: str = "float64",
                 seed: int = 0, init_scale: float = 0.1):
        super().__init__()
        if not 1 <= rank <= n:
            raise ValueError(f"global rank r_g = {rank} must lie in [1, n = {n}]")
        self.config = {"kind": self.kind, "n": int(n), "rank": int(rank),
                       "symmetric": bool(symmetric), "dtype": dtype, "seed": int(seed),
                       "init_scale": float(init_scale)}
        self.n = n
        g = torch.Generator().manual_seed(seed)
        std = init_scale / math.sqrt(n)
        self.Q = nn.Parameter(torch.randn(n, rank, generator=g, dtype=torch_dtype(dtype)) * std)
        self.K = self.Q if symmetric else nn.Parameter(
            torch.randn(n, rank, generator=g, dtype=torch_dtype(dtype)) * std)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        shape = f.shape
        f = check_input(f, self.n)
        return ((f @ self.K) @ self.Q.T).reshape(shape)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        return (f"n={self.n}, r_g={self.config['rank']}, symmetric={self.config['symmetric']}, "
                f"params={self.num_parameters()}")


class SchwarzAttention(nn.Module):
    r"""Two-level overlapping Schwarz attention (paper §4):

    .. math:: M_\theta^{-1} f = \Phi Q_0K_0^T\Phi^T f
              + \sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i f.

    The local blocks are stored padded to the largest subdomain, ``Q`` of shape
    ``(N, max n_i, r_l)``, so the apply is one gather, two batched contractions and one
    scatter-add over all subdomains and right-hand sides at once; padded rows carry weight 0,
    receive zero gradient and are not counted as parameters.

    Parameters
    ----------
    grid : tuple of int
        ``(n,)`` or ``(nx, ny)``.
    N, overlap : int
        Subdomains and :math:`n_\delta` (see :class:`~ddlearn.decomposition.Decomposition`).
    r_local : int or "full"
        :math:`r_\ell \le \min_i n_i`, or ``"full"`` for :math:`r_i = n_i` on every subdomain.
    coarse : str or None
        Coarse space name (``hats``, ``nicolaides``) or ``None`` for the one-level operator.
    r0 : int, optional
        :math:`r_0 \le n_0`; defaults to :math:`n_0`.
    symmetric : bool
        :math:`K_i = Q_i`, :math:`K_0 = Q_0`: every term is :math:`BB^T`, so
        :math:`M_\theta^{-1}` is symmetric positive semidefinite.
    dtype : {"float64", "float32"}
    """

    kind = "schwarz"

    def __init__(self, grid, N: int, overlap: int, r_local: int, coarse: str | None = "hats",
                 r0: int | None = None, symmetric: bool = False, dtype: str = "float64",
                 seed: int = 0, boxes=None, init_scale: float = 0.1):
        super().__init__()
        dt = torch_dtype(dtype)
        dec = Decomposition(grid, N, overlap, boxes)
        sizes = dec.sizes
        if r_local == "full":
            ranks = sizes
        elif isinstance(r_local, (int, np.integer)) and 1 <= r_local <= sizes.min():
            ranks = np.full(dec.N, int(r_local))
        else:
            raise ValueError(f"local rank r_l = {r_local} must be 'full' or an integer in "
                             f"[1, min n_i = {sizes.min()}] (the smallest overlapping "
                             f"subdomain); use a smaller rank or fewer subdomains")
        self.ranks = ranks
        Phi = grid_basis(coarse, dec) if coarse is not None else None
        n0 = Phi.shape[1] if Phi is not None else 0
        if coarse is not None:
            r0 = n0 if r0 is None else r0
            if not 1 <= r0 <= n0:
                raise ValueError(f"coarse rank r_0 = {r0} must lie in [1, n_0 = {n0}]")
        else:
            r0 = 0
        self.dec, self.n, self.n0, self.r0 = dec, dec.n, n0, r0
        self.config = {"kind": self.kind, "grid": list(dec.grid), "N": dec.N,
                       "boxes": list(dec.boxes), "overlap": dec.overlap,
                       "r_local": r_local if r_local == "full" else int(r_local), "coarse": coarse, "r0": int(r0),
                       "symmetric": bool(symmetric), "dtype": dtype, "seed": int(seed),
                       "init_scale": float(init_scale)}
        self.record = rec = DecompositionRecord.of_grid(dec, Phi)
        idx, sqrtD, n_max = rec.index, rec.sqrt_D, rec.index.shape[1]
        self.register_buffer("idx", torch.from_numpy(idx), persistent=False)
        self.register_buffer("sqrtD", torch.from_numpy(sqrtD).to(dt), persistent=False)
        g = torch.Generator().manual_seed(seed)
        r_max = int(ranks.max())
        # Rows beyond n_i and rank columns beyond r_i are padding: zero, and they stay zero
        # because their gradient is a product with zero entries.
        mask = ((self.sqrtD > 0)[..., None]
                & (torch.arange(r_max)[None, None, :] < torch.from_numpy(ranks)[:, None, None])).to(dt)

        def init(*shape, m=None, scale=1.0):
            t = torch.randn(*shape, generator=g, dtype=dt) * scale
            return nn.Parameter(t * m if m is not None else t)

        # Entries of std init_scale / sqrt(rows): the operator starts small (A^{-1} is O(h)-small
        # entrywise), so Adam's first steps do not have to undo a large random operator.
        sl, s0 = init_scale * n_max ** -0.5, init_scale * max(n0, 1) ** -0.5
        self.Q = init(dec.N, n_max, r_max, m=mask, scale=sl)
        self.K = self.Q if symmetric else init(dec.N, n_max, r_max, m=mask, scale=sl)
        self.Phi_sp = Phi
        if Phi is not None:
            self.register_buffer("phi_rows", torch.from_numpy(rec.phi_rows), persistent=False)
            self.register_buffer("phi_cols", torch.from_numpy(rec.phi_cols), persistent=False)
            self.register_buffer("phi_vals", torch.from_numpy(rec.phi_vals).to(dt),
                                 persistent=False)
            self.Q0 = init(n0, r0, scale=s0)
            self.K0 = self.Q0 if symmetric else init(n0, r0, scale=s0)

    @property
    def one_level(self) -> bool:
        return self.config["coarse"] is None

    def local(self, f: torch.Tensor) -> torch.Tensor:
        r""":math:`\sum_i R_i^T D_i^{1/2} Q_iK_i^T D_i^{1/2} R_i f` for ``f`` of shape ``(B, n)``."""
        return schwarz_local(f, self.idx, self.sqrtD, self.Q, self.K)

    def coarse(self, f: torch.Tensor) -> torch.Tensor:
        r""":math:`\Phi Q_0K_0^T\Phi^T f` for ``f`` of shape ``(B, n)``."""
        Phi = self.phi_rows, self.phi_cols, self.phi_vals
        c = coarse_restrict(f, *Phi, self.n0, 1)                  # (B, n0)
        return coarse_prolong((c @ self.K0) @ self.Q0.T, *Phi, self.n, 1)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        shape = f.shape
        f = check_input(f, self.n)
        u = self.local(f)
        if not self.one_level:
            u = u + self.coarse(f)
        return u.reshape(shape)

    def num_parameters(self) -> int:
        """Trainable entries, padding excluded."""
        factors = 1 if self.config["symmetric"] else 2
        return factors * (int(self.dec.sizes @ self.ranks) + self.n0 * self.r0)

    @torch.no_grad()
    def init_from_classical(self, A: sp.spmatrix) -> "SchwarzAttention":
        r"""Set every block to the best rank-:math:`r` approximation of its classical
        counterpart: :math:`Q_iK_i^T \approx D_i^{-1/2}A_i^{-1}D_i^{-1/2}`,
        :math:`Q_0K_0^T \approx A_0^{-1}` (:math:`A_i = R_iAR_i^T`, :math:`A_0 = \Phi^TA\Phi`),
        from the smallest eigenpairs :math:`A_i v = \lambda v`:
        :math:`Q_i = K_i = D_i^{-1/2} V_r\Lambda_r^{-1/2}`. With full ranks
        (``r_local="full"``, :math:`r_0 = n_0`) the operator *is* classical
        two-level additive Schwarz.
        """
        A = sp.csr_matrix(A)
        dt = self.Q.dtype
        self.Q.zero_()
        if self.K is not self.Q:
            self.K.zero_()
        for i, I in enumerate(self.dec.subdomains):
            B = _inverse_factor(A[I][:, I].toarray(), int(self.ranks[i]))
            B /= np.sqrt(self.dec.D(i))[:, None]
            self.Q[i, :len(I), :B.shape[1]] = torch.from_numpy(B).to(dt)
            if self.K is not self.Q:
                self.K[i, :len(I), :B.shape[1]] = torch.from_numpy(B).to(dt)
        if not self.one_level:
            Phi = self.Phi_sp
            B0 = _inverse_factor((Phi.T @ A @ Phi).toarray(), self.r0)
            self.Q0.copy_(torch.from_numpy(B0).to(dt))
            if self.K0 is not self.Q0:
                self.K0.copy_(torch.from_numpy(B0).to(dt))
        return self

    def extra_repr(self) -> str:
        c = self.config
        coarse = "none (one-level)" if self.one_level else f"{c['coarse']}, n_0={self.n0}, r_0={self.r0}"
        return (f"n={self.n}, N={c['N']}, overlap={c['overlap']}, r_l={c['r_local']}, "
                f"coarse={coarse}, symmetric={c['symmetric']}, params={self.num_parameters()}")


def _inverse_factor(Ai: np.ndarray, r: int) -> np.ndarray:
    r""":math:`B = V_r\Lambda_r^{-1/2}` from the ``r`` smallest eigenpairs of SPD ``Ai``, so that
    :math:`BB^T` is the best rank-``r`` approximation of :math:`A_i^{-1}`."""
    lam, V = np.linalg.eigh(Ai)
    return V[:, :r] / np.sqrt(lam[:r])


def positional_features(grid, levels: int, dtype) -> torch.Tensor:
    """Fixed token features, shape ``(n, dim * (2 levels + 1))``, natural ordering."""
    coords = torch.from_numpy(grid_coordinates(grid, interior=True)).to(dtype)  # (n, dim)
    feats = [coords]
    for l in range(levels):
        feats += [torch.sin(2**l * math.pi * coords), torch.cos(2**l * math.pi * coords)]
    return torch.cat(feats, dim=1)


class FLARE(nn.Module):
    """FLARE with fixed learned latent queries (see module docstring)."""

    kind = "flare"

    def __init__(self, grid, heads: int = 4, latents: int = 32, width: int = 16,
                 levels: int = 8, dtype: str = "float64", seed: int = 0):
        super().__init__()
        for name, v in (("heads", heads), ("latents", latents), ("width", width)):
            if v < 1:
                raise ValueError(f"{name} must be positive, got {v}")
        dt = torch_dtype(dtype)
        self.config = {"kind": self.kind, "grid": list(grid), "heads": heads, "latents": latents,
                       "width": width, "levels": levels, "dtype": dtype, "seed": seed}
        self.register_buffer("p", positional_features(grid, levels, dt), persistent=False)
        self.n, d_pos = self.p.shape
        g = torch.Generator().manual_seed(seed)
        self.W_K = nn.Parameter(torch.randn(heads, d_pos, width, generator=g, dtype=dt) / math.sqrt(d_pos))
        self.latent = nn.Parameter(torch.randn(heads, latents, width, generator=g, dtype=dt))
        self.scale = nn.Parameter(torch.full((heads, latents), 1.0 / (heads * self.n), dtype=dt))
        self.width = width

    def queries(self, f: torch.Tensor) -> torch.Tensor:
        """Latent queries: ``(H, M, d)`` (the same for every input) or ``(B, H, M, d)``."""
        return self.latent

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        shape = f.shape
        f = check_input(f, self.n)
        H = self.W_K.shape[0]
        K = torch.einsum("nc,hcd->hnd", self.p, self.W_K)[None]
        Q = self.queries(f)
        if Q.ndim == 3:
            # Fixed queries give one linear operator for the whole batch: route the batch as
            # the value channels, so the attention weights are formed once, not once per sample.
            v = f.T[None, None].expand(-1, H, -1, -1)
            u = route(Q, K, v, self.scale[..., None]).sum(dim=1)[0].T
        else:
            # the right-hand side is every head's value: one channel per token
            v = f[:, None, :, None].expand(-1, H, -1, -1)
            u = route(Q, K.expand(f.shape[0], -1, -1, -1), v, self.scale[..., None]).sum(dim=1)
        return u.reshape(shape)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.config
        return (f"n={self.n}, heads={c['heads']}, latents M={c['latents']}, width={c['width']}, "
                f"params={self.num_parameters()}")


class FLAREPlusPlus(FLARE):
    """FLARE++: routing queries synthesised from the input tokens (see module docstring)."""

    kind = "flare++"

    def __init__(self, grid, heads: int = 4, latents: int = 32, width: int = 16,
                 levels: int = 8, dtype: str = "float64", seed: int = 0):
        super().__init__(grid, heads, latents, width, levels, dtype, seed)
        dt = torch_dtype(dtype)
        g = torch.Generator().manual_seed(seed + 1)
        d_in = self.p.shape[1] + 1
        self.W_K2 = nn.Parameter(torch.randn(heads, d_in, width, generator=g, dtype=dt) / math.sqrt(d_in))
        self.W_V2 = nn.Parameter(torch.randn(heads, d_in, width, generator=g, dtype=dt) / math.sqrt(d_in))

    def queries(self, f: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt((f * f).mean(dim=1, keepdim=True)).clamp_min(torch.finfo(f.dtype).tiny)
        X = torch.cat([self.p.expand(f.shape[0], -1, -1), (f / rms)[..., None]], dim=2)
        K2 = torch.einsum("bnc,hcd->bhnd", X, self.W_K2)
        V2 = torch.einsum("bnc,hcd->bhnd", X, self.W_V2)
        # FLARE's encode, driven by the seeds
        return F.scaled_dot_product_attention(self.latent.expand(f.shape[0], -1, -1, -1), K2, V2)
