r"""Can the learned coarse space's refinement use the Dirichlet factorisation the one-level
Schwarz part already has, instead of factoring its own :math:`M_i`?

    python benchmarks/refinement.py [--quick] [--json FILE] [--repeat R]
    python benchmarks/refinement.py --report FILE      (the markdown tables of a JSON, its plot)

Serial, scipy and torch only (no PETSc solve), ``torch.set_num_threads(1)``.

*Setting*. Per overlapping subdomain :math:`i` the learned coarse space
(:mod:`ddlearn.learned.coarse.local_coarse`) wants the :math:`k = 8` smallest eigenpairs of the
GenEO pencil with the Dirichlet block on the right (the ``dirichlet`` pencil),

.. math:: A_i^N v = \lambda B_i v, \qquad B_i = D_iA_iD_i, \qquad A_i = R_iAR_i^T,
          \qquad A_i^N = A_i - E_i,

:math:`A_i^N` the algebraic Neumann matrix, :math:`E_i = \mathrm{diag}(\ell_i) \ge 0` the
couplings that leave the subdomain, nonzero only on its :math:`b_i` boundary rows, :math:`D_i`
the multiplicity weights (:math:`D_i > 0`, so :math:`B_i` is SPD). From start vectors
:math:`X_i \in \mathbb R^{n_i\times m}` (:math:`m = 8`; the shipped network's,
``start_vectors(model, batch, "network")``, or seeded Gaussian ones, ``"random"``) every
candidate builds a basis :math:`S_i` and then does the same Rayleigh–Ritz on the exact
(regularised) pencil, :func:`~ddlearn.learned.coarse.local_coarse._ritz`:
:math:`V_i` = the :math:`k` Ritz vectors of :math:`(A_i^N + \varepsilon\,\mathrm{diag}A_i^N,
B_i)` on :math:`\mathrm{span}\,S_i` with the smallest Ritz values, :math:`\varepsilon = 10^{-9}`.

*Candidates* (block Krylov space :math:`\mathcal K_s(T, X) = \mathrm{span}\{X, TX, \dots,
T^sX\}`, built as the library's ``_krylov``: each new block orthogonalised twice against the
previous ones, then QR):

- ``none``: :math:`S = X` (no refinement: what the start alone gives).
- ``neumann-lu`` (today, :func:`~ddlearn.learned.coarse.local_coarse.refine`):
  :math:`\mathcal K_s(M^{-1}B, X)`, :math:`M = A^N + \varepsilon\,\mathrm{diag}A^N` factored by
  its own sparse LU. The eigenvalues of :math:`M^{-1}B` are :math:`\approx 1/\lambda`: shift and
  invert at 0, the error in the :math:`j`-th direction shrinks like
  :math:`(\lambda_j/\lambda_{k+1})^s`.
- ``dirichlet-krylov``: :math:`\mathcal K_s(A_i^{-1}B, X)` with the Dirichlet LU. Its
  eigenpairs are those of the other pencil :math:`D A_i D v = \mu A_i v`: on a wanted mode
  the Rayleigh quotient is :math:`1/(\lambda\rho)`, :math:`\rho = v^TA_iv/v^TA^Nv = 1 +
  v^TEv/v^TA^Nv`, so the modes that make the coarse space (near-kernel modes of :math:`A^N`:
  a floating subdomain's constant, a channel or inclusion cut by the boundary, whose
  boundary values :math:`E` charges with the coefficient) are no longer amplified. In
  operator terms :math:`(A^N)^{-1} - A_i^{-1} = (A^N)^{-1}EA_i^{-1}` has rank :math:`b`, and it
  is large exactly on those modes.
- ``dirichlet-lanczos``: :math:`\mathcal K_s(B^{-1}A^N, X)` with :math:`B^{-1} = D^{-1}A_i^{-1}
  D^{-1}`: Krylov for the smallest eigenvalues of :math:`B^{-1}A^N` (its eigenpairs are exactly
  the wanted ones, but it is not inverted: a polynomial filter whose rate is set by
  :math:`(\lambda_{k+1}-\lambda_k)/(\lambda_{\max}-\lambda_{k+1})`, :math:`\lambda_{\max} =
  O(\max D^{-2})`).
- ``dirichlet-smw``: :math:`\mathcal K_s(\tilde M^{-1}B, X)` with the exact inverse of
  :math:`\tilde M = A_i - U\,\mathrm{diag}(e)\,U^T = A^N + \varepsilon\,E`,
  :math:`e = (1-\varepsilon)\ell_b`, :math:`U = I_{:,b}` the boundary rows (the regularisation
  goes through the boundary, so a floating subdomain's constant is lifted by
  :math:`\varepsilon\sum_b\ell`), from the Dirichlet LU by Sherman–Morrison–Woodbury:

  .. math:: \tilde M^{-1} = A_i^{-1} + W S^{-1} W^T, \qquad W = A_i^{-1}U,\qquad
            S = \mathrm{diag}(e)^{-1} - U^TA_i^{-1}U

  (:math:`S` is SPD exactly when :math:`\tilde M` is): :math:`b` extra Dirichlet solves and one
  :math:`b\times b` dense Cholesky per subdomain, then the same Krylov as ``neumann-lu``, one
  Dirichlet solve and one :math:`n_i\times b` product per vector and step. Here
  :math:`\varepsilon = 10^{-6}` (``--smw-eps``): :math:`\mathrm{cond}\,S` grows like
  :math:`1/\varepsilon` on a floating subdomain, and at :math:`10^{-9}` the SMW solve is only
  good to about :math:`3\cdot10^{-7}` (against :math:`7\cdot10^{-10}` at :math:`10^{-6}`); the
  shift it adds to a wanted mode, :math:`\varepsilon\,v^TEv/v^TBv`, stays far below
  :math:`\lambda_{k+1}`.
- ``lobpcg``: :func:`scipy.sparse.linalg.lobpcg` ``(A^N, X, B=B, M=A_i^{-1}, largest=False,
  maxiter=s)``, the Dirichlet solve as preconditioner (its basis: the ``m`` vectors it returns).

*What is measured* (per case and start; ``steps`` = :math:`s`):

- ``cg_its``: CG iterations (scipy ``cg``, rtol 1e-8 on :math:`\|r\|/\|b\|`, seeded Gaussian
  right-hand side, zero start) of the additive two-level Schwarz method
  :func:`ddlearn.classical.reference.two_level` with :math:`\Phi = [R_i^TD_iV_i]_i`; the
  reference ``spectral_its`` uses the exact eigenvectors of the same pencil
  (:func:`~ddlearn.classical.coarse.spectral.local_eigenvectors`, ARPACK, tol 1e-10).
- ``loss_mean`` / ``loss_max`` over the subdomains of :math:`\sum_{j\le k}(\tilde\lambda_j -
  \lambda_j)/\lambda_{k+1}` (the training loss: Ritz against exact, in units of the gap).
- ``residual_max``: :math:`\max_{i,j\le k}\|A^Nv-\tilde\lambda Bv\| / (\|A^Nv\| +
  |\tilde\lambda|\|Bv\|)`.
- ``time_s``: what replaces the factorisation of :math:`M` plus the refinement: for
  ``neumann-lu`` the :math:`M` LU + Krylov + Rayleigh–Ritz, for the others everything after the
  Dirichlet LU (which the one-level part has anyway) — SMW set-up, Krylov or LOBPCG and the same
  Rayleigh–Ritz; best of ``--repeat`` runs (the machine is shared). Beside it, per case, the
  Dirichlet LU itself (``dirichlet_factor_s``) and the :math:`M` LU (``neumann_factor_s``),
  both one scipy ``splu`` per subdomain as PCASM factors them, and (``*_blockdiag_s``) one
  ``splu`` of the block-diagonal matrix as ``PatchBatch`` does.
- ``solves``: single-vector solves per subdomain (mean), with :math:`M` for ``neumann-lu``,
  with :math:`A_i` otherwise (SMW's :math:`b` included); ``boundary_rows``: :math:`b` (mean,
  max) and ``factorizations``: extra sparse factorisations per subdomain.
- ``diagnostics`` per case (:func:`diagnostics`): the energy ratio :math:`\rho_j =
  v_j^TA_iv_j/v_j^TA^Nv_j` of the exact wanted modes (how much more the Dirichlet block sees of
  them) and the per-step growth rates of shift-and-invert against the best polynomial in
  :math:`B^{-1}A^N`.
- Checks: ``library_check``: ``neumann-lu`` here against the library's ``refine`` on the
  ``PatchBatch`` (largest Ritz-value difference over :math:`\lambda_{k+1}`);
  ``smw_check``: ``dirichlet-smw`` against the same Krylov with :math:`\tilde M` factored by its
  own LU (exact SMW: the same Ritz values).

*Cases*: 2D 255², :math:`N = 64` boxes, overlap 1, ``random_channels``,
``random_inclusions``, ``random_lognormal`` at contrast 1e6, seed 200000 (the test seeds), from
the network's start (the shipped model is trained at this local resolution) and from random
ones; 3D ``random_inclusions3d`` 32³, :math:`N = 64` (8³ boxes + overlap), from the 2D-trained
network applied directly through ``start_vectors`` (no resolution check, recorded as
``network (2D model)``) and from random ones. ``--quick``: 127², :math:`N = 16`, channels,
network start, :math:`s = 2`.

The full run takes about 22 minutes of wall time on the shared 2-core machine (most of it CG
with the poor coarse spaces, up to 1100 iterations), ``--quick`` about 10 s.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
import petsc4py

petsc4py.init([])
from ddlearn.classical.coarse.spectral import SpectralSettings, local_eigenvectors  # noqa: E402
from ddlearn.classical.neumann import REGULARISATION  # noqa: E402
from ddlearn.classical.reference import neumann_matrix, two_level  # noqa: E402
from ddlearn.decomposition import Decomposition  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.learned.common import atomic_write_json  # noqa: E402
from ddlearn.learned.coarse.local_coarse import (PRETRAINED, PatchBatch, _ritz,  # noqa: E402
                                                 load_model, refine, start_vectors)
from many_fields import relative  # noqa: E402

METHODS = ("none", "neumann-lu", "dirichlet-krylov", "dirichlet-lanczos", "dirichlet-smw",
           "lobpcg")
#: (method, steps) of the full run and of --quick
FULL = [("none", 0), ("neumann-lu", 2), ("neumann-lu", 4), ("dirichlet-smw", 2)] + \
    [(m, s) for m in ("dirichlet-krylov", "dirichlet-lanczos", "lobpcg") for s in (2, 4, 8)]
#: :math:`\varepsilon` of ``dirichlet-smw`` (module docstring)
SMW_REGULARISATION = 1e-6
CASES = ("channels", "inclusions", "lognormal", "inclusions3d")
QUICK = [("none", 0), ("neumann-lu", 2), ("dirichlet-smw", 2), ("dirichlet-krylov", 2),
         ("dirichlet-lanczos", 2), ("lobpcg", 2)]


class Local:
    r"""One subdomain: :math:`A^N`, :math:`A_i`, :math:`D`, :math:`B = DA_iD`, the boundary
    rows :math:`b` (where :math:`\ell = \mathrm{diag}A_i - \mathrm{diag}A^N > 0`) and
    :math:`\ell_b`."""

    def __init__(self, A: sp.csr_matrix, I: np.ndarray, D: np.ndarray):
        self.I, self.D = I, D
        self.AN = neumann_matrix(A, I)
        self.Ai = sp.csr_matrix(A[I][:, I])
        self.B = (sp.diags(D) @ self.Ai @ sp.diags(D)).tocsr()
        ell = self.Ai.diagonal() - self.AN.diagonal()
        self.boundary = np.flatnonzero(ell > 0)
        self.ell = ell[self.boundary]
        self.lu = None  # the Dirichlet LU, shared by every candidate

    def neumann_M(self) -> sp.csc_matrix:
        r""":math:`M = A^N + \varepsilon\,\mathrm{diag}A^N` (the library's)."""
        return sp.csc_matrix(self.AN + sp.diags(REGULARISATION * np.abs(self.AN.diagonal())))

    def boundary_M(self, eps: float) -> sp.csc_matrix:
        r""":math:`\tilde M = A_i - U\mathrm{diag}((1-\varepsilon)\ell_b)U^T`."""
        e = np.zeros(self.AN.shape[0])
        e[self.boundary] = (1 - eps) * self.ell
        return sp.csc_matrix(self.Ai - sp.diags(e))


class Counter:
    """Counts single-vector solves."""

    def __init__(self):
        self.n = 0

    def __call__(self, solve, Y):
        Y = np.asarray(Y)
        self.n += 1 if Y.ndim == 1 else Y.shape[1]
        return solve(Y)


def krylov(X: np.ndarray, T, steps: int) -> np.ndarray:
    r"""Orthonormal basis of :math:`\mathrm{span}\{X, TX, \dots, T^sX\}` as the library's
    ``_krylov`` builds it (orthogonalise twice, QR of each new block)."""
    blocks = [np.linalg.qr(X)[0]]
    for _ in range(steps):
        Y = T(blocks[-1])
        Q = np.hstack(blocks)
        Y = Y - Q @ (Q.T @ Y)
        Y = Y - Q @ (Q.T @ Y)
        blocks.append(np.linalg.qr(Y)[0])
    return np.hstack(blocks)


def smw_operator(loc: Local, eps: float, count: Counter):
    r""":math:`Y \mapsto \tilde M^{-1}Y` from the Dirichlet LU by Sherman–Morrison–Woodbury
    (module docstring): ``b`` solves for :math:`W = A_i^{-1}U`, Cholesky of the capacitance
    matrix :math:`S = \mathrm{diag}(e)^{-1} - W_{b,:}`."""
    n, bnd = loc.AN.shape[0], loc.boundary
    U = np.zeros((n, len(bnd)))
    U[bnd, np.arange(len(bnd))] = 1.0
    W = count(loc.lu.solve, U)
    S = np.diag(1.0 / ((1 - eps) * loc.ell)) - W[bnd]
    S = sla.cho_factor((S + S.T) / 2, lower=True)

    def apply(Y):
        Z = count(loc.lu.solve, Y)
        return Z + W @ sla.cho_solve(S, Z[bnd])

    return apply


def basis(loc: Local, X: np.ndarray, method: str, steps: int, count: Counter,
          eps: float = REGULARISATION, timing: dict | None = None) -> np.ndarray:
    """The basis ``S`` of one subdomain for ``method`` (module docstring) from the start
    ``X``; ``smw-direct``: the SMW candidate's Krylov with :math:`\\tilde M` factored directly
    (the exactness check). ``timing['factor_s']`` accumulates the time of extra sparse
    factorisations."""
    timing = {} if timing is None else timing
    if method == "none":
        return np.linalg.qr(X)[0]
    if method in ("neumann-lu", "smw-direct"):
        clock = time.process_time()
        lu = spla.splu(loc.neumann_M() if method == "neumann-lu" else loc.boundary_M(eps))
        timing["factor_s"] = timing.get("factor_s", 0.0) + time.process_time() - clock
        return krylov(X, lambda Q: count(lu.solve, loc.B @ Q), steps)
    if method == "dirichlet-krylov":
        return krylov(X, lambda Q: count(loc.lu.solve, loc.B @ Q), steps)
    if method == "dirichlet-lanczos":
        Dinv = 1.0 / loc.D[:, None]
        return krylov(X, lambda Q: Dinv * count(loc.lu.solve, Dinv * (loc.AN @ Q)), steps)
    if method == "dirichlet-smw":
        apply = smw_operator(loc, eps, count)
        return krylov(X, lambda Q: apply(loc.B @ Q), steps)
    if method == "lobpcg":
        n = loc.AN.shape[0]
        P = spla.LinearOperator((n, n), matvec=lambda y: count(loc.lu.solve, y),
                                matmat=lambda Y: count(loc.lu.solve, Y), dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, V = spla.lobpcg(loc.AN, np.linalg.qr(X)[0], B=loc.B, M=P, largest=False,
                               maxiter=steps)
        return np.linalg.qr(V)[0]
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def ritz(batch: PatchBatch, bases: list[np.ndarray], k: int):
    """Per subdomain the ``k`` smallest Ritz pairs on ``span S_i`` (the library's
    Rayleigh–Ritz)."""
    with torch.no_grad():
        return [(lam[:k].numpy(), V[:, :k].numpy())
                for lam, V in _ritz(batch, [torch.from_numpy(np.ascontiguousarray(S))
                                            for S in bases])]


def refinement(locs, batch, starts, method: str, steps: int, k: int, eps=REGULARISATION):
    """``(pairs, timing, solves per subdomain)`` of one candidate on every subdomain;
    ``timing``: ``time_s`` (CPU seconds of this process: the machine is shared), ``wall_s``
    and ``factor_s`` (the CPU seconds of extra sparse factorisations among them)."""
    count, timing = Counter(), {"factor_s": 0.0}
    wall, cpu = time.perf_counter(), time.process_time()
    bases = [basis(loc, X, method, steps, count, eps, timing) for loc, X in zip(locs, starts)]
    pairs = ritz(batch, bases, k)
    timing.update(time_s=time.process_time() - cpu, wall_s=time.perf_counter() - wall)
    return pairs, timing, count.n / len(locs)


def coarse_basis(n: int, locs, vectors) -> sp.csr_matrix:
    r""":math:`\Phi = [R_i^TD_iV_i]_i`."""
    rows, cols, vals, offset = [], [], [], 0
    for loc, V in zip(locs, vectors):
        rows.append(np.repeat(loc.I, V.shape[1]))
        cols.append(np.tile(np.arange(offset, offset + V.shape[1]), len(loc.I)))
        vals.append((loc.D[:, None] * V).ravel())
        offset += V.shape[1]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n, offset))


def cg_iterations(A: sp.csr_matrix, dec, Phi, rhs) -> dict:
    """CG (rtol 1e-8) preconditioned by the additive two-level Schwarz method with ``Phi``."""
    P = two_level(A, dec, Phi)
    its = [0]

    def callback(_):
        its[0] += 1

    x, info = spla.cg(A, rhs, rtol=1e-8, maxiter=3000, M=P, callback=callback)
    return {"its": its[0], "converged": info == 0,
            "true_relres": float(np.linalg.norm(rhs - A @ x) / np.linalg.norm(rhs))}


def quality(locs, pairs, exact, k: int) -> dict:
    """Loss against the exact eigenvalues and the largest relative residual."""
    losses, residuals = [], []
    for loc, (lam, V), ex in zip(locs, pairs, exact):
        losses.append(float(np.sum(lam[:k] - ex[:k]) / ex[k]))
        AV, BV = loc.AN @ V, loc.B @ V
        r = np.linalg.norm(AV - BV * lam, axis=0)
        den = np.linalg.norm(AV, axis=0) + np.abs(lam) * np.linalg.norm(BV, axis=0)
        residuals.append(float(np.max(r / den)))
    return {"loss_mean": float(np.mean(losses)), "loss_max": float(np.max(losses)),
            "residual_max": float(np.max(residuals)),
            "residual_median": float(np.median(residuals))}


def best_cpu(fn, repeat: int) -> float:
    """The least CPU time of ``repeat`` calls of ``fn``."""
    best = np.inf
    for _ in range(max(repeat, 1)):
        clock = time.process_time()
        fn()
        best = min(best, time.process_time() - clock)
    return float(best)


def diagnostics(locs, exact, vectors, k: int) -> dict:
    r"""Why the Dirichlet solve does or does not stand in for :math:`(A^N)^{-1}`, from the
    exact eigenpairs (medians over the subdomains):

    - ``energy_ratio``: :math:`\rho_j = v_j^TA_iv_j / v_j^TA^Nv_j = 1 + v_j^TEv_j /
      v_j^TA^Nv_j` over :math:`j \le k` (median and largest of all, capped at
      :math:`10^{16}`): how much more energy
      the Dirichlet block gives the wanted modes; :math:`A_i^{-1}` damps them by
      :math:`1/\rho_j` against what :math:`(A^N)^{-1}` does;
    - ``lambda_1``, ``lambda_k``, ``lambda_k1`` (:math:`\lambda_{k+1}`), ``lambda_max``
      (largest eigenvalue of :math:`B^{-1}A^N`, the far end of ``dirichlet-lanczos``'s
      spectrum);
    - per step, how much a wanted eigencomponent :math:`j` grows against the unwanted ones:
      ``invert_rate_j`` :math:`= \log(\lambda_{k+1}/\lambda_j)` for shift-and-invert at 0
      (``neumann-lu``, ``dirichlet-smw``), ``chebyshev_rate_j`` :math:`=
      2\sqrt{(\lambda_{k+1}-\lambda_j)/(\lambda_{\max}-\lambda_{k+1})}` for the best
      polynomial in :math:`B^{-1}A^N` (``dirichlet-lanczos``), :math:`j \in \{1, k\}`.
    """
    rows = []
    for loc, lam, V in zip(locs, exact, vectors):
        # capped at 1e16: A^N's energy of a floating subdomain's constant is rounding
        rho = [float(min(v @ (loc.Ai @ v) / max(v @ (loc.AN @ v), 1e-300), 1e16))
               for v in V.T]
        n = loc.AN.shape[0]
        Binv = spla.LinearOperator((n, n), matvec=lambda y, d=loc.D, lu=loc.lu:
                                   lu.solve(np.ravel(y) / d) / d, dtype=np.float64)
        top = float(spla.eigsh(loc.AN, k=1, M=loc.B, Minv=Binv, which="LA", tol=1e-3,
                               v0=np.random.default_rng(0).standard_normal(n),
                               return_eigenvectors=False)[0])
        l1, lk, lk1 = max(lam[0], 1e-300), lam[k - 1], lam[k]
        rows.append({"rho": rho, "lambda_1": l1, "lambda_k": lk, "lambda_k1": lk1,
                     "lambda_max": top, "invert_rate_1": float(np.log(lk1 / l1)),
                     "invert_rate_k": float(np.log(lk1 / lk)),
                     "chebyshev_rate_1": float(2 * np.sqrt((lk1 - l1) / (top - lk1))),
                     "chebyshev_rate_k": float(2 * np.sqrt((lk1 - lk) / (top - lk1)))})
    rho = np.concatenate([r.pop("rho") for r in rows])
    out = {"energy_ratio": {"median": float(np.median(rho)), "max": float(np.max(rho))}}
    out.update({key: float(np.median([r[key] for r in rows])) for key in rows[0]})
    return out


def run_case(case: dict, model, methods, k: int, starts: list[str], repeat: int,
             smw_eps: float = SMW_REGULARISATION, log=print) -> dict:
    """Every candidate on one matrix (see the module docstring)."""
    problem = make_problem(case["family"], case["n"], contrast=case["contrast"],
                           seed=case["seed"])
    A = sp.csr_matrix(problem.matrix())
    grid = tuple(problem.grid)
    dec = Decomposition(grid, case["N"], case["overlap"])
    locs = [Local(A, I, dec.D(i)) for i, I in enumerate(dec.subdomains)]
    out = dict(case, grid=list(grid), k=k, unknowns=int(A.shape[0]),
               subdomain_size=[int(min(len(l.I) for l in locs)),
                               int(max(len(l.I) for l in locs))],
               boundary_rows={"mean": float(np.mean([len(l.boundary) for l in locs])),
                              "max": int(max(len(l.boundary) for l in locs))})
    # the shared Dirichlet LU (as PCASM: one per subdomain) and the M LU, timed alone
    out["dirichlet_factor_s"] = best_cpu(lambda: [setattr(l, "lu", spla.splu(
        sp.csc_matrix(l.Ai))) for l in locs], repeat)
    out["neumann_factor_s"] = best_cpu(lambda: [spla.splu(l.neumann_M()) for l in locs], repeat)
    batch = PatchBatch([l.AN for l in locs], [l.D for l in locs], list(range(len(locs))),
                       rights=[l.Ai for l in locs])
    for name, mat in (("dirichlet", sp.block_diag([l.Ai for l in locs], format="csc")),
                      ("neumann", sp.csc_matrix(batch.M))):
        out[f"{name}_factor_blockdiag_s"] = best_cpu(lambda: spla.splu(mat), repeat)
    # exact eigenpairs of the same pencil: the loss and the spectral reference
    clock = time.process_time()
    exact, spectral = [], []
    for loc in locs:
        lam, V = local_eigenvectors(loc.AN, loc.D, SpectralSettings(
            k + 1, eigensolver="scipy", tol=1e-10), right=loc.Ai)
        exact.append(lam)
        spectral.append(V[:, :k])
    out["exact_s"] = time.process_time() - clock
    out["diagnostics"] = diagnostics(locs, exact, spectral, k)
    rhs = np.random.default_rng(0).standard_normal(A.shape[0])
    ref = cg_iterations(A, dec, coarse_basis(A.shape[0], locs, spectral), rhs)
    out["spectral"] = ref
    log(f"{case['name']}: sizes {out['subdomain_size']}, b {out['boundary_rows']}, "
        f"Dirichlet LU {out['dirichlet_factor_s']:.2f} s, M LU {out['neumann_factor_s']:.2f} s, "
        f"spectral {ref['its']} its")
    out["starts"] = []
    for start in starts:
        clock = time.process_time()
        X = start_vectors(model, batch, start).numpy()
        entry = {"start": start if start == "random" or len(grid) == 2 else f"{start} (2D model)",
                 "forward_s": time.process_time() - clock, "rows": []}
        Xs = batch.split(X)
        lib = refine(batch, X, 2, k)
        for method, steps in methods:
            eps = smw_eps if method == "dirichlet-smw" else REGULARISATION
            pairs, timing, solves = refinement(locs, batch, Xs, method, steps, k, eps)
            for _ in range(repeat - 1):
                again = refinement(locs, batch, Xs, method, steps, k, eps)[1]
                timing = min(timing, again, key=lambda t: t["time_s"])
            row = {"method": method, "steps": steps, **timing, "solves": solves,
                   "factorizations": 1 if method == "neumann-lu" else 0,
                   **quality(locs, pairs, exact, k)}
            cg = cg_iterations(A, dec, coarse_basis(A.shape[0], locs, [V for _, V in pairs]),
                               rhs)
            row.update(cg_its=cg["its"], converged=cg["converged"],
                       true_relres=cg["true_relres"])
            if method == "neumann-lu" and steps == 2:
                entry["library_check"] = max(
                    float(np.max(np.abs(a[0] - b[0])) / ex[k])
                    for a, b, ex in zip(pairs, lib, exact))
            if method == "dirichlet-smw":
                direct = refinement(locs, batch, Xs, "smw-direct", steps, k, eps)[0]
                row["smw_check"] = max(float(np.max(np.abs(a[0] - b[0])) / ex[k])
                                       for a, b, ex in zip(pairs, direct, exact))
            entry["rows"].append(row)
            log(f"  {entry['start']:>18} {method:>18} s={steps}: {row['cg_its']:4d} its "
                f"(spectral {ref['its']}), loss {row['loss_mean']:.3g}, residual "
                f"{row['residual_max']:.2g} (median {row['residual_median']:.2g}), "
                f"{timing['time_s']:.3f} s ({timing['factor_s']:.3f} factor), "
                f"{solves:.0f} solves")
        out["starts"].append(entry)
    return out


def cases(quick: bool, which=None) -> list[dict]:
    """The cases of the run (``which``: a subset of their families' short names)."""
    seed, contrast = 200_000, 1e6
    if quick:
        return [dict(name="channels 127² N=16", family="random_channels", n=127, N=16,
                     overlap=1, contrast=contrast, seed=seed)]
    out = [dict(name=f"{fam} 255² N=64", family=f"random_{fam}", n=255, N=64, overlap=1,
                contrast=contrast, seed=seed) for fam in ("channels", "inclusions", "lognormal")]
    out.append(dict(name="inclusions3d 32³ N=64", family="random_inclusions3d", n=32, N=64,
                    overlap=1, contrast=contrast, seed=seed))
    return [c for c in out if which is None or c["family"].replace("random_", "") in which]


def _solves(row: dict, case: dict) -> str:
    if row["method"] == "none":
        return "0"
    if row["method"] == "neumann-lu":
        return f"LU(M) + {row['solves']:.0f} M"
    if row["method"] == "dirichlet-smw":
        b = case["boundary_rows"]["mean"]
        return f"{b:.0f} + {row['solves'] - b:.0f} A_i, chol {b:.0f}²"
    return f"{row['solves']:.0f} A_i"


def report(data: dict) -> str:
    """The markdown table of a JSON (and the factorisation times per case)."""
    lines = ["| case | start | method | steps | CG its | spectral its | loss mean | "
             "residual max | time s (refine) | extra solves |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for case in data["cases"]:
        for entry in case["starts"]:
            for r in entry["rows"]:
                its = f"{r['cg_its']}" + ("" if r["converged"] else " (not converged)")
                lines.append(f"| {case['name']} | {entry['start']} | {r['method']} | "
                             f"{r['steps']} | {its} | {case['spectral']['its']} | "
                             f"{r['loss_mean']:.3g} | {r['residual_max']:.2g} | "
                             f"{r['time_s']:.3f} | {_solves(r, case)} |")
    lines += ["", "| case | subdomain size | boundary rows b (mean, max) | Dirichlet LU s | "
              "M LU s | Dirichlet LU s (block-diag) | M LU s (block-diag) | network s | "
              "library check | SMW check |", "|---|---|---|---|---|---|---|---|---|---|"]
    for case in data["cases"]:
        smw = max((r.get("smw_check", 0.0) for e in case["starts"] for r in e["rows"]),
                  default=0.0)
        lib = max(e.get("library_check", 0.0) for e in case["starts"])
        fwd = ", ".join(f"{e['forward_s']:.2f}" for e in case["starts"])
        lines.append(f"| {case['name']} | {case['subdomain_size'][0]}..{case['subdomain_size'][1]}"
                     f" | {case['boundary_rows']['mean']:.0f}, {case['boundary_rows']['max']} | "
                     f"{case['dirichlet_factor_s']:.3f} | {case['neumann_factor_s']:.3f} | "
                     f"{case['dirichlet_factor_blockdiag_s']:.3f} | "
                     f"{case['neumann_factor_blockdiag_s']:.3f} | {fwd} | {lib:.1e} | "
                     f"{smw:.1e} |")
    lines += ["", "| case | energy ratio ρ of the wanted modes (median, max) | λ_1, λ_k, λ_k+1, "
              "λ_max (medians) | invert rate j = 1, k | Chebyshev rate j = 1, k |",
              "|---|---|---|---|---|"]
    for case in data["cases"]:
        g = case["diagnostics"]
        lines.append(f"| {case['name']} | {g['energy_ratio']['median']:.3g}, "
                     f"{g['energy_ratio']['max']:.2g} | {g['lambda_1']:.2g}, {g['lambda_k']:.3g}, "
                     f"{g['lambda_k1']:.3g}, {g['lambda_max']:.3g} | {g['invert_rate_1']:.3g}, "
                     f"{g['invert_rate_k']:.3g} | {g['chebyshev_rate_1']:.3g}, "
                     f"{g['chebyshev_rate_k']:.3g} |")
    return "\n".join(lines)


def plot(data: dict, path: str) -> None:
    """CG iterations against the refinement's CPU time, one panel per case and start, one
    line per method through its steps; the dashed line is the spectral count."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter
    panels = [(c, e) for c in data["cases"] for e in c["starts"]]
    cols = min(len(panels), 4)
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.1 * rows), squeeze=False)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    for ax, (case, entry) in zip(axes.ravel(), panels):
        for method in METHODS:
            pts = [r for r in entry["rows"] if r["method"] == method]
            if not pts:
                continue
            line, = ax.plot([r["time_s"] for r in pts], [r["cg_its"] for r in pts], "o-",
                            ms=4, label=method)
            for r in pts:
                ax.annotate(str(r["steps"]), (r["time_s"], r["cg_its"]), fontsize=6,
                            xytext=(3, 2), textcoords="offset points", color=line.get_color())
        ax.axhline(case["spectral"]["its"], color="k", ls="--", lw=0.8, label="spectral")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="both", labelsize=6)
        ax.set_xlabel("refinement CPU s (all subdomains)", fontsize=7)
        ax.set_ylabel("CG iterations", fontsize=7)
        ax.set_title(f"{case['name']}, {entry['start']} start", fontsize=8)
    axes.ravel()[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="127², N = 16, channels, s = 2")
    ap.add_argument("--model", default=PRETRAINED, help="learned coarse-space model")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="timing: best of this many runs")
    ap.add_argument("--json", default="benchmarks/results/refinement.json")
    ap.add_argument("--cases", nargs="+", choices=CASES,
                    help="a subset of the full run's cases (default: all)")
    ap.add_argument("--smw-eps", type=float, default=SMW_REGULARISATION,
                    help="the boundary regularisation of dirichlet-smw")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--report", metavar="FILE",
                    help="print the tables of a JSON (and redraw its plot unless --no-plot)")
    args = ap.parse_args(argv)
    if args.report:
        import json
        with open(args.report) as f:
            data = json.load(f)
        print(report(data))
        if not args.no_plot:
            plot(data, os.path.splitext(args.report)[0] + ".png")
        return None
    torch.set_num_threads(1)
    model, _, _ = load_model(args.model)
    methods = QUICK if args.quick else FULL
    starts = ["network"] if args.quick else ["network", "random"]
    repeat = 1 if args.quick else args.repeat
    data = {"benchmark": "refinement", "model": relative(args.model), "k": args.k,
            "quick": args.quick, "repeat": repeat, "regularisation": REGULARISATION,
            "smw_regularisation": args.smw_eps,
            "cg": {"rtol": 1e-8, "rhs": "standard normal, seed 0", "x0": 0,
                   "preconditioner": "ddlearn.classical.reference.two_level (additive)"},
            "cases": [run_case(c, model, methods, args.k, starts, repeat, args.smw_eps)
                      for c in cases(args.quick, args.cases)]}
    atomic_write_json(args.json, data)
    if not args.no_plot:
        plot(data, os.path.splitext(args.json)[0] + ".png")
    print(report(data))
    return data


if __name__ == "__main__":
    main()
