r"""GenEO-type spectral coarse space on overlapping subdomains.

Per subdomain :math:`i` the generalized eigenproblem between the local Neumann matrix
:math:`A_i^N` (:mod:`ddlearn.classical.neumann`: the user's auxiliary matrix, or the algebraic
one) on the left and a partition-of-unity-weighted matrix on the right,

.. math:: A_i^N v = \lambda\, D_i A_i^R D_i\, v, \qquad
          A_i^R = \begin{cases} A_i^N & \text{pencil } \mathtt{neumann} \\
                                A_i = R_iAR_i^T & \text{pencil } \mathtt{dirichlet}
                  \end{cases}

(the Dirichlet pencil is the one of PETSc's algebraic GenEO, ``PCHPDDM`` with
``-pc_hpddm_block_splitting``), and the eigenvectors of the smallest :math:`\lambda` (the
``nev`` smallest, or those below a threshold :math:`\tau`) give coarse vectors
:math:`R_i^T D_i v`. CG iterations of the two-level method then grow like
:math:`\sqrt{1/\lambda_{k+1}}` however high the contrast.

The partition of unity :math:`D_i` (:math:`\sum_i R_i^TD_iR_i = I`) is one of

- ``multiplicity``: :math:`1/m_j`, :math:`m_j` the number of subdomains holding row :math:`j`;
- ``boolean``: 1 on the rows subdomain :math:`i` owns, 0 on its overlap (PCHPDDM's);
- ``interior``: :math:`\chi_i/\sum_j\chi_j`, zero on the subdomain's boundary rows (GenEO's with
  exact Neumann matrices);
- ``auto``: ``interior`` with the user's Neumann matrices, ``multiplicity`` without.

With the ``boolean`` one the coarse vectors do not overlap, and :math:`D_iA_i^RD_i` is the
block of the owned rows whichever the pencil (they differ only on the boundary rows).

*Solve*: both sides may be singular (a floating subdomain), so the pencil is solved as
:math:`D_iA_i^RD_i v = \mu (A_i^N + \varepsilon\,\mathrm{diag}\,A_i^N) v` for the largest
:math:`\mu` (:math:`\lambda \approx 1/\mu`; :func:`~ddlearn.classical.neumann.regularised_pencil`).
With SLEPc (Krylov–Schur, the shift spectral transform factoring the right-hand matrix once by
Cholesky, CHOLMOD's where the PETSc build has it) on ``COMM_SELF`` per subdomain, or scipy's
ARPACK with the same factorisation.

Options (``-<prefix>ddlearn_spectral_``): ``nev k`` (default 8), ``threshold tau`` (default 0:
all ``nev``; :math:`\tau > 0`: the eigenvalues below :math:`\tau`, ``nev`` the cap, SLEPc's
eigensolve stopping once it has them, its restarts sized :data:`PROJECTED`, not ``nev``),
``pencil {neumann,dirichlet}`` (default dirichlet), ``partition_of_unity
{auto,multiplicity,boolean,interior}`` (default auto), ``eigensolver {slepc,scipy}``, ``tol``,
``warm_start`` (default off), ``share_factor`` (default on) and SLEPc's own under ``eps_``.

*Shared factorisation* (``share_factor``): inside the two-level PC the right-hand matrix
:math:`A_i^N + \varepsilon\,\mathrm{diag}A_i^N` has the pattern of the Dirichlet block
:math:`A_i` (always with the algebraic Neumann matrix; with a user's when assembled on that
pattern), so SLEPc's spectral transform solves with the one-level part's own sub-PC, factored
on that pattern first: one ordering and symbolic factorisation per subdomain instead of two
(:mod:`ddlearn.classical.shared_factor`), and no second extraction of :math:`A_i`. Not shared
(each factored on its own, as with the option off): with ``eigensolver scipy``, where an option
under ``-<prefix>ddlearn_spectral_st_`` configures the spectral transform's own solver, or where
the one-level part does not factor its blocks (``-<prefix>ddlearn_local_sub_pc_type ilu``).
``found`` counts the subdomains shared (``shared_factorisations``).

*Warm start* (``warm_start``): a set-up on new values of the same matrix (a loop over
coefficient fields, time steps) starts each subdomain's eigensolve from the previous set-up's
eigenvectors :math:`V_i^{\mathrm{old}}` of that subdomain. When the field changes slowly, the
wanted eigenvectors of :math:`A_i(\kappa+\delta\kappa)` lie within :math:`O(\|\delta\kappa\|)`
of :math:`\mathrm{span}\,V_i^{\mathrm{old}}`, a near-invariant subspace, and Krylov–Schur
started from it needs fewer restarts than from a random vector. Krylov–Schur iterates from one
vector, so the first of the initial space (``EPSSetInitialSpace``) is
:math:`V_i^{\mathrm{old}}\mathbf{1}`, with a component along every previous eigenvector; block
solvers (``-ddlearn_spectral_eps_type subspace``) use the columns after it too. ARPACK takes
:math:`v_0 = V_i^{\mathrm{old}}\mathbf{1}`. A subdomain starts warm only when its index set is
the previous one's (length and a hash of the sorted global rows), any other cold, and ``found``
says how many of each (``warm_subdomains``, ``cold_subdomains``, ``warm_start_result``: ``first
set-up``, ``warm``, ``partly warm`` or ``cold restart``); ``eps_iterations`` (SLEPc's iteration
counts, Krylov–Schur's restarts, summed over subdomains and ranks) is there with or without the
warm start. Measured (random channels 63², contrast 1e6, 16 subdomains, ``nev`` 4, the field
times a smooth factor within :math:`e^{\pm\delta}`): 18 / 20 / 26 SLEPc iterations warm against
32 cold for :math:`\delta` = 0.01 / 0.1 / 0.5, the eigenvalues those of a cold solve to
:math:`2\cdot 10^{-9}` relative.

*Why the Dirichlet pencil by default*: the two pencils differ only on the subdomain's boundary
rows, where :math:`A_i - A_i^N` holds the couplings that leave it. With the Neumann matrix on
both sides and the multiplicity weights, a subdomain whose rows all lie in two subdomains (a
slab two layers thick with overlap 1, PETSc's row blocks of a 3D grid) has :math:`D_i \equiv
1/2` and :math:`A^N v = 4\,D A^N D v` for every :math:`v`: the eigenvectors are arbitrary.
Measured (``benchmarks/geneo_reference.py`` (retired; ``git show
75845ac:benchmarks/geneo_reference.py``), 32³, contrast 1e6, 16 subdomains, k = 8, additive):
row-block slabs 125 → 22 CG iterations (inclusions) and 41 → 23 (layered channels), RCB boxes
24 → 21 and 28 → 21; 2D channels 255², N = 64 boxes: 40.7 → 31.0. With the ``boolean`` or
``interior`` weights, zero on the boundary rows, both pencils are the same.
"""
from __future__ import annotations


import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI
from petsc4py import PETSc
from slepc4py import SLEPc

from ...decomposition.collective import collective_check
from ...decomposition.petsc_rows import sequential_aij
from ...decomposition.subdomains import rows_fingerprint
from ..coarse_space import CoarseInput, CoarseSpace, CoarseVectors, subdomain_columns
from ..overlapping import available_local_solvers
from ..neumann import (boolean_partition_of_unity, dirichlet_blocks, interior_partition_of_unity,
                       neumann_matrices, regularised_pencil)

__all__ = ["EIGENSOLVERS", "PENCILS", "PARTITIONS_OF_UNITY", "SpectralSettings",
           "local_eigenvectors", "robust_local_eigenvectors", "Spectral"]

EIGENSOLVERS = ("slepc", "scipy")
#: the matrix :math:`A_i^R` weighted on the right of the pencil
PENCILS = ("neumann", "dirichlet")
PARTITIONS_OF_UNITY = ("auto", "multiplicity", "boolean", "interior")


class SpectralSettings:
    """``nev`` eigenvectors per subdomain at most; with ``threshold`` > 0 only those with
    :math:`\\lambda < \\tau` among them; the ``pencil``'s right-hand matrix
    (:data:`PENCILS`), the ``partition_of_unity`` (:data:`PARTITIONS_OF_UNITY`); ``tol`` of the
    eigensolver; ``warm_start``: start from the previous set-up's eigenvectors;
    ``share_factor``: factor the pencil on the local blocks' symbolic factorisation where
    they are lent (:class:`Spectral`'s module docstring). A bad value is
    refused naming its option under ``prefix`` (the PC's prefix + ``ddlearn_spectral_``)."""

    def __init__(self, nev: int = 8, threshold: float = 0.0, eigensolver: str = "slepc",
                 tol: float = 1e-10, pencil: str = "dirichlet", partition_of_unity: str = "auto",
                 warm_start: bool = False, prefix: str = "ddlearn_spectral_",
                 share_factor: bool = True):
        if int(nev) != nev or nev < 1:
            raise ValueError(f"-{prefix}nev must be a positive integer, got {nev!r}")
        if threshold < 0:
            raise ValueError(f"-{prefix}threshold must be positive (or 0 for 'the nev "
                             f"smallest'), got {threshold!r}")
        for what, value, choices in (("eigensolver", eigensolver, EIGENSOLVERS),
                                     ("pencil", pencil, PENCILS),
                                     ("partition_of_unity", partition_of_unity,
                                      PARTITIONS_OF_UNITY)):
            if value not in choices:
                raise ValueError(f"unknown -{prefix}{what} {value!r}; choose one of "
                                 f"{', '.join(choices)}")
        self.nev, self.threshold, self.eigensolver, self.tol = int(nev), threshold, eigensolver, tol
        self.pencil, self.partition_of_unity = pencil, partition_of_unity
        self.warm_start, self.prefix = bool(warm_start), prefix
        self.share_factor = bool(share_factor)

    def with_eigensolver(self, eigensolver: str) -> "SpectralSettings":
        return SpectralSettings(self.nev, self.threshold, eigensolver, self.tol, self.pencil,
                                self.partition_of_unity, self.warm_start, self.prefix,
                                self.share_factor)

    def describe(self) -> dict:
        return {"nev": self.nev, "threshold": self.threshold, "eigensolver": self.eigensolver,
                "pencil": self.pencil, "partition_of_unity": self.partition_of_unity,
                "warm_start": self.warm_start, "share_factor": self.share_factor}


def _start_vectors(start: np.ndarray, nev: int) -> list:
    """The initial space from previous eigenvectors (columns of ``start``, the first ``nev``):
    their sum first, the one vector Krylov–Schur iterates from, then all but the last column
    for block solvers: the same span in ``nev`` vectors, never more than SLEPc's ``ncv``."""
    start = start[:, :nev]
    return [start.sum(axis=1)] + [start[:, k] for k in range(start.shape[1] - 1)]


#: with a threshold, SLEPc's largest projected dimension (``mpd``): the cost of a restart
PROJECTED = 32


def _slepc(B: sp.csr_matrix, M: sp.csr_matrix, nev: int, tol: float, prefix: str,
           start: np.ndarray | None = None, factored: tuple = (None, None),
           threshold: float = 0.0):
    r"""SLEPc's Krylov--Schur on :math:`Bv = \mu Mv`; ``factored``: ``(Mp, ksp)``, ``M`` as a
    PETSc matrix and a KSP whose PC has factored it (:mod:`~ddlearn.classical.shared_factor`),
    for the spectral transform to solve with; ``(None, None)``: ``M`` factored here.

    ``threshold`` :math:`\tau > 0`: the pairs of :math:`\mu > 1/\tau` (:math:`\lambda <
    \tau`), at most ``nev``: SLEPc's threshold test (``EPSSetThreshold``) stops the solve at
    the first converged :math:`\mu` below :math:`1/\tau`, and a projected dimension of
    :data:`PROJECTED` (``mpd``; ``ncv = nev + mpd``) makes each restart cost
    ``PROJECTED`` vectors' work, not ``2 * nev``: Krylov--Schur locks the converged pairs and
    goes on past them; SLEPc's default, ``mpd = ncv = 2 * nev``, makes a large cap cost as
    much as computing all of it (``-{prefix}eps_mpd`` overrides it)."""
    lent, lent_ksp = factored
    Bp, Mp = sequential_aij(B), lent if lent is not None else sequential_aij(M)
    eps = SLEPc.EPS().create(comm=PETSc.COMM_SELF)
    eps.setOperators(Bp, Mp)
    eps.setProblemType(SLEPc.EPS.ProblemType.GHEP)
    eps.setWhichEigenpairs(SLEPc.EPS.Which.LARGEST_REAL)
    if threshold > 0:
        eps.setDimensions(nev, PETSc.DECIDE, min(nev, PROJECTED))
        eps.setThreshold(1.0 / threshold)
    else:
        eps.setDimensions(nev)
    eps.setTolerances(tol, 1000)
    ksp = eps.getST().getKSP()
    ksp.setType(PETSc.KSP.Type.PREONLY)
    ksp.getPC().setType(PETSc.PC.Type.CHOLESKY)
    if "cholmod" in available_local_solvers():
        # the supernodal factorisation of the shift-invert matrix where the build has it
        # (-ddlearn_spectral_st_pc_factor_mat_solver_type overrides it)
        ksp.getPC().setFactorSolverType("cholmod")
    eps.setOptionsPrefix(prefix)  # SLEPc adds eps_: -ddlearn_spectral_eps_max_it, ..._eps_type
    eps.setFromOptions()
    if lent_ksp is not None:
        # the same PC object: its factor of Mp is current, so the transform's set-up (the
        # same operator) factors nothing
        ksp.setPC(lent_ksp.getPC())
    space = []
    if start is not None:
        for column in _start_vectors(start, nev):
            v = Bp.createVecRight()
            v.setArray(column)
            space.append(v)
        eps.setInitialSpace(space)
    eps.solve()
    iterations = eps.getIterationNumber()
    found = eps.getConverged()
    mu, V = np.zeros(min(found, nev)), np.zeros((B.shape[0], min(found, nev)))
    vr = Bp.createVecRight()
    for k in range(len(mu)):
        mu[k] = eps.getEigenpair(k, vr).real
        V[:, k] = vr.getArray(readonly=True)
    if lent_ksp is not None:
        # hand the lent PC back before the EPS goes: SLEPc's reset of its transform resets
        # the transform's PC (PCReset), which would discard the lent factorisation
        spare = PETSc.PC().create(comm=PETSc.COMM_SELF)
        ksp.setPC(spare)
        spare.destroy()
    for o in (eps, Bp, vr, *space):
        o.destroy()
    if lent is None:
        Mp.destroy()
    return mu, V, {"iterations": int(iterations), "warm": start is not None}


def _scipy(B: sp.csr_matrix, M: sp.csr_matrix, nev: int, tol: float, prefix: str,
           start: np.ndarray | None = None):
    n = B.shape[0]
    dense = nev >= n - 1
    if dense:  # ARPACK needs k < n: small subdomains are solved densely (no start to use)
        mu, V = sla.eigh(B.toarray(), M.toarray())
    else:
        lu = spla.splu(sp.csc_matrix(M))
        Minv = spla.LinearOperator(M.shape, matvec=lu.solve, dtype=np.float64)
        mu, V = spla.eigsh(B, k=nev, M=M, Minv=Minv, which="LA", tol=tol,
                           v0=np.ones(n) if start is None else _start_vectors(start, nev)[0])
    order = np.argsort(mu)[::-1][:nev]
    # ARPACK's restart count is not exposed: iterations count SLEPc's alone
    return mu[order], V[:, order], {"iterations": 0, "warm": start is not None and not dense}


def local_eigenvectors(AN: sp.csr_matrix, D: np.ndarray, settings: SpectralSettings,
                       prefix: str = "ddlearn_spectral_", right: sp.csr_matrix | None = None,
                       start: np.ndarray | None = None, details: dict | None = None,
                       lend=None):
    r"""``(lambda, V)``: the kept eigenpairs of :math:`A^N v = \lambda DA^RD v`
    (:math:`A^R` = ``right``, default :math:`A^N`), smallest first, ``V`` with
    :math:`v^T(A^N+\varepsilon I)v = 1`. SLEPc reads its options with ``prefix``
    (``-{prefix}eps_max_it``, ...). ``start``: vectors (columns, rows as ``AN``'s) to start the
    eigensolver from (the warm start). ``lend``: ``M -> context manager`` yielding a factored
    ``(Mp, ksp)`` for the right-hand matrix ``M`` or ``(None, None)``
    (:meth:`~ddlearn.classical.shared_factor.LocalBlocks.factored`), used by SLEPc.
    ``details``, when given, receives ``iterations`` (SLEPc's; 0 for scipy), ``warm`` (whether
    the solver took ``start``) and ``vectors`` (every computed eigenvector, before the
    threshold)."""
    B, M = regularised_pencil(AN, D, right)
    nev = min(settings.nev, AN.shape[0])
    if settings.eigensolver == "slepc" and lend is not None:
        with lend(M) as factored:
            mu, V, info = _slepc(B, M, nev, settings.tol, prefix, start, factored,
                                 settings.threshold)
    elif settings.eigensolver == "slepc":
        mu, V, info = _slepc(B, M, nev, settings.tol, prefix, start,
                             threshold=settings.threshold)
    else:
        mu, V, info = _scipy(B, M, nev, settings.tol, prefix, start)
    if details is not None:
        details.update(info, vectors=V)
    lam = 1.0 / np.maximum(mu, 1e-300)
    keep = lam < settings.threshold if settings.threshold > 0 else np.ones(len(lam), bool)
    return lam[keep], V[:, keep]


def robust_local_eigenvectors(AN: sp.csr_matrix, D: np.ndarray, settings: SpectralSettings,
                              prefix: str = "ddlearn_spectral_",
                              right: sp.csr_matrix | None = None,
                              start: np.ndarray | None = None, details: dict | None = None,
                              lend=None):
    """``(lambda, V, retried)``: :func:`local_eigenvectors` (``lend`` as there), solved again
    by scipy's ARPACK (``retried``) when SLEPc fails: SLEPc's Cholesky of a barely indefinite
    regularised Neumann matrix (P1 on obtuse meshes) can fail where ARPACK's LU does not.

    Raises
    ------
    RuntimeError
        Naming the failure (both, when SLEPc failed and ARPACK too).
    """
    try:
        return (*local_eigenvectors(AN, D, settings, prefix, right, start, details, lend),
                False)
    except Exception as e:  # SLEPc reports some failures as SystemError
        if settings.eigensolver != "slepc":
            raise RuntimeError(str(e)) from e
        first = e
    if details is not None:
        details.clear()
    try:
        return (*local_eigenvectors(AN, D, settings.with_eigensolver("scipy"), right=right,
                                    start=start, details=details), True)
    except Exception as e:
        raise RuntimeError(f"{first}; with scipy: {e}") from e


#: a column of :math:`D_iV_i` whose singular value is below this times the largest is dependent
DEPENDENT = 1e-10


def independent_columns(D: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, int]:
    r"""``(V', dropped)``: ``V`` itself when the coarse vectors :math:`D_iV_i` are independent,
    else :math:`V' = VQ_r` with :math:`D_iV = P\Sigma Q^T` and :math:`Q_r` the right singular
    vectors of :math:`\sigma > 10^{-10}\sigma_1` (:data:`DEPENDENT`): the same span, without
    the directions that would make :math:`\Phi^TA\Phi` singular.

    Eigenvectors that differ only where :math:`D_i` is zero give the same coarse vector: with
    the interior partition of unity, a subdomain whose Neumann matrix has several near-zero
    modes supported near its boundary (one process's MATIS of a scalar problem) gives such
    pairs."""
    if V.shape[1] < 2:
        return V, 0
    _, sigma, Qt = np.linalg.svd(D[:, None] * V, full_matrices=False)
    rank = int(np.sum(sigma > DEPENDENT * sigma[0])) if sigma[0] > 0 else 0
    if rank == V.shape[1]:
        return V, 0
    return V @ Qt[:rank].T, V.shape[1] - rank


class Spectral(CoarseSpace):
    """The spectral coarse space; keywords as :class:`SpectralSettings`."""

    #: GenEO's adaptive setting (:meth:`adaptive`): the eigenvalues below ``threshold``, at
    #: most ``nev`` per subdomain
    ADAPTIVE = {"nev": 128, "threshold": 0.5}

    @classmethod
    def adaptive(cls) -> "Spectral":
        r"""The space of the eigenvectors of :math:`\lambda < 0.5`, at most 128 per subdomain
        (:data:`ADAPTIVE`; options still override either): as many per subdomain as its
        coefficients need, so CG's iterations, bounded through :math:`1/\lambda_{k+1}`,
        hardly depend on the contrast. The default on a ``MATIS``, whose local matrices are
        exact Neumann matrices. Measured (``python benchmarks/petsc_tutorials.py``): the
        threshold 0.5 against 0.3 and a fixed ``nev`` 8 on ex71 elasticity and the MATIS
        client."""
        return cls(**cls.ADAPTIVE)

    name = "spectral"
    value_dependent = True
    uses_neumann = True

    def __init__(self, nev: int = 8, threshold: float = 0.0, eigensolver: str = "slepc",
                 tol: float = 1e-10, pencil: str = "dirichlet", partition_of_unity: str = "auto",
                 warm_start: bool = False, share_factor: bool = True):
        super().__init__()
        self.settings = SpectralSettings(nev, threshold, eigensolver, tol, pencil,
                                         partition_of_unity, warm_start,
                                         share_factor=share_factor)
        self._prefix = "ddlearn_spectral_"
        #: with the warm start: per global subdomain id, (fingerprint, eigenvectors in
        #: sorted-row order) of the last set-up on this rank
        self._previous: dict = {}

    def set_from_options(self, prefix: str) -> None:
        opts, s = self.options(prefix), self.settings
        self._prefix = f"{prefix}{self.name}_"
        # same options on every rank, so a bad value raises on every rank
        self.settings = SpectralSettings(opts.getInt("nev", s.nev),
                                         opts.getReal("threshold", s.threshold),
                                         opts.getString("eigensolver", s.eigensolver),
                                         opts.getReal("tol", s.tol),
                                         opts.getString("pencil", s.pencil),
                                         opts.getString("partition_of_unity",
                                                        s.partition_of_unity),
                                         opts.getBool("warm_start", s.warm_start),
                                         self._prefix,
                                         opts.getBool("share_factor", s.share_factor))

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        r"""The coarse vectors :math:`R_i^TD_iv` (collective). A subdomain whose eigensolve did
        not give what was asked stops the set-up on every rank, naming it: never a silently
        partial coarse space."""
        comm, s, settings = inp.comm, inp.subdomains, self.settings
        found, problems = {}, []
        lender = self._lender(inp)
        blocks = [lender.csr(k) for k in range(len(s.overlapping))] if lender is not None \
            else dirichlet_blocks(inp.A, s)
        ANs = neumann_matrices(inp.A, s, inp.auxiliary, "the spectral coarse space", blocks,
                               inp.prefix)
        rights = blocks if settings.pencil == "dirichlet" else ANs
        unity = settings.partition_of_unity
        if unity == "auto":
            # exact Neumann matrices: GenEO's partition of unity, zero on the subdomain boundary
            unity = "interior" if inp.auxiliary is not None else "multiplicity"
        weights = {"multiplicity": lambda: s.weights,
                   "boolean": lambda: boolean_partition_of_unity(s),
                   "interior": lambda: interior_partition_of_unity(inp.A, s, blocks, ANs)}[unity]()
        fallbacks, iterations, dropped, previous = 0, 0, 0, {}
        solved = matched = warm = 0
        n = inp.A.getSize()[0]
        for k, (i, I, D, AN, AR) in enumerate(zip(s.ids, s.overlapping, weights, ANs, rights)):
            if len(I) == n:
                # the subdomain is the whole matrix (one process's MATIS): its local solve is
                # exact, nothing is left for a coarse space to correct
                found[int(i)] = (I[:0], D[:0], np.zeros((0, 0)), np.zeros(0))
                solved += 1
                continue
            start, key = None, rows_fingerprint(I) if settings.warm_start else None
            if key is not None and key == self._previous.get(int(i), (None,))[0]:
                matched += 1
                start = np.empty_like(self._previous[int(i)][1])
                start[np.argsort(I)] = self._previous[int(i)][1]  # back to this I's order
            details = {}
            try:
                lam, V, retried = robust_local_eigenvectors(
                    AN, D, settings, self._prefix, AR, start, details,
                    None if lender is None else lambda M, k=k: lender.factored(k, M))
            except RuntimeError as e:
                problems.append(f"subdomain {int(i)}: {e}")
                continue
            fallbacks += retried
            solved += 1
            iterations += details["iterations"]
            warm += bool(details["warm"])
            if key is not None and details["vectors"].shape[1]:
                previous[int(i)] = (key, details["vectors"][np.argsort(I)])
            if settings.threshold == 0 and V.shape[1] < min(settings.nev, len(I)):
                problems.append(f"subdomain {int(i)}: {V.shape[1]} of {settings.nev} "
                                f"eigenpairs converged")
            keep = D != 0  # rows a zero weight takes out of R_i^T D_i v (Boolean: the overlap)
            V, dependent = independent_columns(D[keep], V[keep])
            dropped += dependent
            found[int(i)] = (I[keep], D[keep], V, lam)
        collective_check(comm, not problems,
                         "the spectral coarse space's eigensolve failed on " + "; ".join(problems)
                         + f": try the other -{self._prefix}eigensolver, a smaller "
                         f"-{self._prefix}nev, a looser -{self._prefix}tol or more "
                         f"-{self._prefix}eps_max_it")
        out = subdomain_columns(comm, s.N, {i: f[:3] for i, f in found.items()})
        out.neumann = ANs
        counts = [f[2].shape[1] for f in found.values()]
        largest = [float(f[3].max()) for f in found.values() if len(f[3])]
        mpi = comm.tompi4py()
        self.found = {
            "vectors": out.n0,
            "per_subdomain_min": mpi.allreduce(min(counts, default=settings.nev), op=MPI.MIN),
            "per_subdomain_max": mpi.allreduce(max(counts, default=0), op=MPI.MAX),
            "largest_kept_lambda": mpi.allreduce(max(largest, default=0.0), op=MPI.MAX),
            "auxiliary": inp.auxiliary is not None,
            "partition_of_unity_used": unity,
            "scipy_fallbacks": mpi.allreduce(fallbacks),
            "dependent_dropped": mpi.allreduce(dropped),
            "shared_factorisations": mpi.allreduce(lender.shared if lender is not None else 0),
            "eps_iterations": mpi.allreduce(iterations)}
        if settings.warm_start:
            had = mpi.allreduce(bool(self._previous), op=MPI.LOR)
            solved, matched, warm = (mpi.allreduce(c) for c in (solved, matched, warm))
            self.found.update(
                warm_subdomains=warm, cold_subdomains=solved - warm,
                # matched but cold: scipy's dense solve of a subdomain of <= nev + 1 rows
                dense_subdomains_matched=matched - warm,
                warm_start_result="first set-up" if not had else
                "cold restart" if not matched else "warm" if warm == solved else "partly warm")
        # kept only with the warm start: nev vectors per subdomain are not free
        self._previous = previous
        return out

    def _lender(self, inp: CoarseInput):
        """The one-level part's blocks to factor the pencils on
        (:class:`~ddlearn.classical.shared_factor.LocalBlocks`), or ``None``: not lent, not
        wanted (``share_factor`` off, the scipy eigensolver, the spectral transform configured
        from the options), or not this rank's subdomains' blocks."""
        blocks, s = inp.local_blocks, inp.subdomains
        if blocks is None or not self.settings.share_factor or \
                self.settings.eigensolver != "slepc" or len(blocks) != len(s.overlapping):
            return None
        if any(k.startswith(f"{self._prefix}st_") for k in PETSc.Options().getAll()):
            return None
        if any(blocks.csr(k).shape[0] != len(I) for k, I in enumerate(s.overlapping)):
            return None
        return blocks

    def describe(self) -> dict:
        return {"name": self.name, **self.settings.describe(), **self.found}

    def view(self, viewer: PETSc.Viewer) -> None:
        m = self.describe()
        if "vectors" not in m:
            return super().view(viewer)
        viewer.printfASCII(f"  spectral coarse space ({m['eigensolver']}, "
                           f"{'auxiliary' if m['auxiliary'] else 'algebraic'} Neumann matrices, "
                           f"{m['pencil']} pencil, {m['partition_of_unity_used']} partition of "
                           f"unity): "
                           f"{m['vectors']} eigenvectors, {m['per_subdomain_min']}.."
                           f"{m['per_subdomain_max']} per subdomain (nev {m['nev']}, threshold "
                           f"{m['threshold']:g}), largest kept lambda "
                           f"{m['largest_kept_lambda']:.3g}"
                           + (f", {m['scipy_fallbacks']} subdomains solved by scipy after SLEPc "
                              f"failed" if m["scipy_fallbacks"] else "")
                           + (f", {m['shared_factorisations']} pencils factored on the local "
                              f"blocks' symbolic factorisation" if m["shared_factorisations"]
                              else "")
                           + (f", {_warm_phrase(m)}" if "warm_start_result" in m else "") + "\n")


def _warm_phrase(m: dict) -> str:
    """What the warm start did, for :meth:`Spectral.view`."""
    warm, cold, result = m["warm_subdomains"], m["cold_subdomains"], m["warm_start_result"]
    dense = m["dense_subdomains_matched"]
    its = f"{m['eps_iterations']} SLEPc iterations"
    if result == "first set-up":
        return f"warm start: first set-up, all {cold} subdomains cold, {its}"
    if result == "cold restart":
        return (f"warm start: cold restart, no subdomain matched the previous set-up's "
                f"(all {cold} cold: subdomains changed), {its}")
    why = "" if not cold else " (subdomains changed or new)" if not dense else \
        f" ({cold - dense} changed or new, {dense} solved densely)"
    return f"warm start: {warm} subdomains from the previous eigenvectors, {cold} cold{why}, {its}"
