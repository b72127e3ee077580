r"""The one-level overlapping Schwarz operator :math:`M_{AS1}^{-1} = \sum_i R_i^T A_i^{-1} R_i`
(``basic``, symmetric, for CG) or its restricted variant :math:`\sum_i \tilde R_i^T A_i^{-1}R_i`
(``restrict``, RAS) as PETSc's PCASM fed our index sets.

``subdomains`` is anything with ``index_sets(overlapping: bool)`` returning this rank's PETSc
index sets in the matrix's numbering (:class:`~ddlearn.decomposition.petsc_rows.RowLayout`,
:class:`~ddlearn.decomposition.subdomains.Subdomains`).

The local solves are exact: each block :math:`A_i = R_i A R_i^T` is factored once per set-up
(``preonly`` sub-KSPs) by the factorisation :data:`LOCAL_SOLVERS` names
(``-<prefix>ddlearn_local_solver`` of the two-level PC; :func:`local_factorisation`), unless the
options database chooses the blocks' solver itself (``-<asm prefix>sub_pc_type``,
``-<asm prefix>sub_pc_factor_mat_solver_type``). :func:`factor_blocks` factors them and checks
every block on every rank, so a singular block on one rank stops every rank with the same
error instead of leaving the others in a collective.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI
from petsc4py import PETSc

from ..decomposition.collective import collective_check
from ..decomposition.petsc_rows import assembled_aij
from ..decomposition.petsc_rows import sequential_aij

__all__ = ["ASM_TYPES", "LOCAL_SOLVERS", "LocalFactorisation", "is_symmetric",
           "available_local_solvers",
           "check_local_solver", "local_factorisation", "configure_asm", "asm_pc",
           "exact_local_solves", "factor_blocks", "SparseSolver"]

ASM_TYPES = {"basic": PETSc.PC.ASMType.BASIC, "restrict": PETSc.PC.ASMType.RESTRICT,
             "interpolate": PETSc.PC.ASMType.INTERPOLATE}


#: the local factorisations: ``auto`` (below), PETSc's own ``lu`` and ``cholesky``, CHOLMOD's
#: supernodal Cholesky (``cholmod``, SuiteSparse) and MUMPS's multifrontal Cholesky (``mumps``)
LOCAL_SOLVERS = ("auto", "lu", "cholesky", "cholmod", "mumps")
#: the names under which the PETSc build lists the package a factorisation needs
#: (``PetscHasExternalPackage``: a SuiteSparse PETSc downloaded is ``suitesparse``, one
#: configured from the system's libraries lists its parts, ``cholmod``, ``umfpack``, ...)
_PACKAGES = {"cholmod": ("cholmod", "suitesparse"), "mumps": ("mumps",)}
#: the package in words, and the configure options that add it
_WANTS = {"cholmod": ("CHOLMOD (SuiteSparse)", "--download-suitesparse or --with-suitesparse"),
          "mumps": ("MUMPS", "--download-mumps with --download-scalapack")}
#: relative tolerance of the symmetry test (:func:`is_symmetric`),
#: :math:`|a_{jk} - a_{kj}| \le 10^{-12} \|A\|_\infty`
SYMMETRY_RTOL = 1e-12
_PETSC_ERR_SUP = 56  # PETSc's "no support for this operation for this object type"


def is_symmetric(A: PETSc.Mat) -> bool | None:
    r"""Whether ``A`` is symmetric to :data:`SYMMETRY_RTOL` :math:`\|A\|_\infty`, measured: a
    symmetry flag set on an assembled matrix survives later changes of its values, so it is not
    trusted. For a shell matrix, which cannot be measured, its flag if one is set, else
    ``None``; ``None`` too for a type without a symmetry test. Collective for a parallel
    matrix; the type, and so the answer, is the same on every rank. The Krylov layer tests the
    matrix with it, the local factorisations their blocks."""
    if A.getType() in (PETSc.Mat.Type.SHELL, PETSc.Mat.Type.PYTHON):
        known, flag = A.isSymmetricKnown()
        return bool(flag) if known else None
    if A.getType() == PETSc.Mat.Type.IS:
        # unassembled: symmetric local matrices on one local-to-global map sum to a symmetric
        # matrix; otherwise the assembled sum decides
        rows, cols = A.getLGMap()
        local = A.getISLocalMat()
        mine = np.array_equal(rows.getIndices(), cols.getIndices()) and \
            local.getSize()[0] == local.getSize()[1] and is_symmetric(local)
        if A.getComm().tompi4py().allreduce(bool(mine), op=MPI.LAND):
            return True
        B = assembled_aij(A)
        try:
            return is_symmetric(B)
        finally:
            B.destroy()
    try:
        return bool(A.isSymmetric(SYMMETRY_RTOL * A.norm(PETSc.NormType.INFINITY)))
    except PETSc.Error as e:
        if e.ierr == _PETSC_ERR_SUP:
            return None
        raise


def available_local_solvers() -> tuple[str, ...]:
    """The values of :data:`LOCAL_SOLVERS` this PETSc build serves (not collective: the build is
    the same on every rank)."""
    return tuple(s for s in LOCAL_SOLVERS if s not in _PACKAGES or
                 any(PETSc.Sys.hasExternalPackage(p) for p in _PACKAGES[s]))


def check_local_solver(comm, solver: str, option: str) -> None:
    """Refuse, on every rank, a local factorisation that is not one or that this PETSc build
    lacks, naming ``option`` (the option with the PC's prefix) and this build's choices."""
    have = available_local_solvers()
    collective_check(comm, solver in LOCAL_SOLVERS,
                     f"unknown {option} {solver!r}; choose one of {', '.join(have)} (this "
                     f"PETSc build's)")
    package, configure = _WANTS.get(solver, ("", ""))
    collective_check(comm, solver in have,
                     f"{option} {solver}: this PETSc build has no {package} (PETSc.Sys."
                     f"hasExternalPackage is False for "
                     f"{' and '.join(repr(p) for p in _PACKAGES.get(solver, ()))}); choose one "
                     f"of {', '.join(have)}, or rebuild PETSc with {package} ({configure})")


@dataclass(frozen=True)
class LocalFactorisation:
    """How the local blocks are factored: ``pc_type`` (``lu`` or ``cholesky``) by ``package``
    (``petsc``, ``cholmod``, ``mumps``, or the user's), for the request ``solver``; ``note`` says
    why it differs from the request, if it does."""

    solver: str
    pc_type: str
    package: str
    note: str = ""

    def __str__(self) -> str:
        return f"{self.pc_type} ({self.package})" + (f"; {self.note}" if self.note else "")


def local_factorisation(solver: str = "auto", symmetric: bool = True) -> LocalFactorisation:
    r"""The factorisation of the local blocks for the request ``solver``
    (:data:`LOCAL_SOLVERS`):

    - ``auto``: CHOLMOD's supernodal Cholesky where the build has it (SuiteSparse), else MUMPS's
      Cholesky where it has MUMPS, else PETSc's own LU. PETSc's own Cholesky is not the
      fallback: measured on single blocks (one thread, SeqAIJ, PETSc 3.26, both with the
      nested-dissection ordering, best of four), the 7-point Laplacian on :math:`20^3` nodes
      factored in 0.30 s by LU and 0.41 s by Cholesky, hexahedral (Q1) elasticity on
      :math:`13^3` nodes (6084 rows) in 1.9 s and 2.1 s, tetrahedral (P1) elasticity on
      :math:`15^3` nodes (9450 rows) in 5.4 s and 4.2 s; its solves took 1.8--2x LU's in all
      three (it stores half the entries);
    - ``lu``, ``cholesky``: PETSc's own;
    - ``cholmod``, ``mumps``: that package's Cholesky (refused where the build lacks it,
      :func:`check_local_solver`).

    Cholesky needs symmetric blocks. With ``symmetric=False`` (a block of a nonsymmetric
    matrix) every request falls back to LU: MUMPS's for ``mumps``, PETSc's otherwise. The
    restricted and interpolated variants (``-ddlearn_local_type restrict``) change only which
    rows of :math:`A_i^{-1} R_i x` are added back, not the blocks :math:`A_i = R_i A R_i^T`: on
    a symmetric matrix they keep the Cholesky factorisation."""
    if solver not in LOCAL_SOLVERS:
        raise ValueError(f"unknown local solver {solver!r}; choose one of "
                         f"{', '.join(available_local_solvers())}")
    have = available_local_solvers()
    if solver not in have:
        raise ValueError(f"local solver {solver}: this PETSc build has no "
                         f"{_WANTS[solver][0]}; choose one of {', '.join(have)}")
    chosen = solver
    if solver == "auto":
        chosen = next((s for s in ("cholmod", "mumps") if s in have), "lu")
    package = chosen if chosen in _PACKAGES else "petsc"
    if chosen == "lu":
        return LocalFactorisation(solver, "lu", "petsc")
    if not symmetric:
        package = "mumps" if chosen == "mumps" else "petsc"
        return LocalFactorisation(solver, "lu", package,
                                  "blocks not symmetric: LU instead of Cholesky")
    return LocalFactorisation(solver, "cholesky", package)


class SparseSolver:
    r""":math:`X = S^{-1}B` for a sparse matrix ``S`` (scipy) and dense right-hand sides ``B``
    (columns), ``S`` factored once on ``COMM_SELF`` the way the local blocks are
    (:func:`local_factorisation` of ``solver``: CHOLMOD's supernodal Cholesky where the build
    has it), all columns in one ``MatMatSolve``. The serial set-up paths (GDSW's energy-minimal
    extension) use it instead of scipy's SuperLU, an LU with a column ordering (COLAMD) that
    fills 3D blocks far more than a nested-dissection Cholesky. Call :meth:`destroy` when done
    (PETSc objects)."""

    def __init__(self, S, solver: str = "auto"):
        self._M = sequential_aij(S)
        self.factorisation = local_factorisation(solver, is_symmetric(self._M) is True)
        self._ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
        self._ksp.setOperators(self._M)
        self._ksp.setType(PETSc.KSP.Type.PREONLY)
        pc = self._ksp.getPC()
        pc.setType(self.factorisation.pc_type)
        pc.setFactorSolverType(self.factorisation.package)
        self._ksp.setUp()
        self._F = pc.getFactorMatrix()

    def solve(self, B: np.ndarray) -> np.ndarray:
        B = np.asfortranarray(B, dtype=np.float64)  # PETSc's dense matrices are column-major
        Bm = PETSc.Mat().createDense(B.shape, array=B, comm=PETSc.COMM_SELF)
        Xm = PETSc.Mat().createDense(B.shape, comm=PETSc.COMM_SELF)
        Xm.setUp()
        self._F.matSolve(Bm, Xm)
        X = Xm.getDenseArray().copy()
        Bm.destroy(), Xm.destroy()
        return X

    def destroy(self) -> None:
        self._ksp.destroy(), self._M.destroy()


def _set_subdomains(pc: PETSc.PC, subdomains, variant: str) -> None:
    if variant not in ASM_TYPES:
        raise ValueError(f"unknown ASM variant {variant!r}; choose one of {sorted(ASM_TYPES)}")
    pc.setType(PETSc.PC.Type.ASM)
    pc.setASMType(ASM_TYPES[variant])
    pc.setASMOverlap(0)  # the index sets already carry the overlap
    overlapping, owned = subdomains.index_sets(True), subdomains.index_sets(False)
    pc.setASMLocalSubdomains(len(overlapping), overlapping, owned)
    for s in overlapping + owned:
        s.destroy()


def configure_asm(pc: PETSc.PC, subdomains, variant: str = "basic") -> PETSc.PC:
    r"""Make ``pc`` (typically a KSP's PC, set up later by the KSP) one-level Schwarz on
    ``subdomains``. Call :func:`exact_local_solves` after its set-up for exact local solves
    (:func:`ddlearn.classical.krylov.solve` does)."""
    _set_subdomains(pc, subdomains, variant)
    return pc


def _blocks_symmetric(comm, blocks) -> bool:
    """Whether every rank's blocks are symmetric to :data:`SYMMETRY_RTOL` (collective)."""
    # a block type without a symmetry test (None): only LU is safe
    mine = all(is_symmetric(B) is True for B in blocks)
    return bool(comm.tompi4py().allreduce(mine, op=min))


def exact_local_solves(pc: PETSc.PC, solver: str = "auto") -> LocalFactorisation | None:
    """After set-up of a PCASM (or a PCMG whose smoothers are PCASM): local solves preonly +
    the factorisation ``solver`` asks for (:func:`local_factorisation`; Cholesky only where
    every block is symmetric, measured here), unless the options database chose otherwise
    under the PC's prefix (the PETSc way: types in code, options decide):
    ``-<prefix>sub_pc_type`` replaces the type, and ``-<prefix>sub_pc_factor_mat_solver_type``
    the package. PCASM factors its blocks at the first solve (PCSetUpOnBlocks), so nothing is
    factored twice. Collective; returns what the blocks use (a PCMG: its last level's)."""
    if pc.getType() == PETSc.PC.Type.MG:
        out = None
        for level in range(1, pc.getMGLevels()):
            out = exact_local_solves(pc.getMGSmoother(level).getPC(), solver) or out
        return out
    if pc.getType() != PETSc.PC.Type.ASM:
        return None
    opts = PETSc.Options(pc.getOptionsPrefix() or "")
    subs = pc.getASMSubKSP()
    user_type = opts.getString("sub_pc_type", "") or None
    user_package = opts.getString("sub_pc_factor_mat_solver_type", "") or None
    symmetric = True
    if user_type is None and local_factorisation(solver).pc_type == "cholesky":
        symmetric = _blocks_symmetric(pc.getComm(), [k.getOperators()[1] for k in subs])
    chosen = local_factorisation(solver, symmetric)
    for ksp in subs:
        if not opts.hasName("sub_ksp_type"):
            ksp.setType(PETSc.KSP.Type.PREONLY)
        sub = ksp.getPC()
        if user_type is None and sub.getType() != chosen.pc_type:
            sub.setType(chosen.pc_type)
            if user_package is None:
                sub.setFactorSolverType(chosen.package)
            # the blocks read their options as the type PCASM gave them (ILU): read the
            # factorisation's (-sub_pc_factor_shift_type, ordering, ...) again for this type
            sub.setFromOptions()
    if user_type is None and user_package is None:
        return chosen
    note = ", ".join(f"-{pc.getOptionsPrefix() or ''}{k} {v}" for k, v in
                     (("sub_pc_type", user_type), ("sub_pc_factor_mat_solver_type",
                                                   user_package)) if v)
    return LocalFactorisation(solver, user_type or chosen.pc_type,
                              user_package or (chosen.package if user_type is None else "its "
                                               "default"), f"from the options: {note}")


#: PETSc's PCFailedReason values, in words
_FAILED = {1: "structural zero pivot, a missing diagonal entry", 2: "zero pivot",
           3: "out of memory", 4: "factorisation failed", 6: "a sub-solver failed"}
#: at most this many rows named per failing block
_ROWS_SHOWN = 3


def _subdomain_ids(subdomains, count: int) -> list:
    """The global ids of this rank's ``count`` subdomains (a RowLayout's or Subdomains' own)."""
    for name in ("ids", "local_subdomains"):
        ids = getattr(subdomains, name, None)
        if ids is not None and len(ids) == count:
            return [int(i) for i in ids]
    return [f"{k} of this rank" for k in range(count)]


def _petsc_zero_pivot(sub: PETSc.PC) -> tuple[float, int] | None:
    """``MatFactorGetErrorZeroPivot`` of the factor of PETSc's own LU ``sub`` (petsc4py 3.26
    does not wrap it): the pivot and the step of the factorisation, in the factor's ordering;
    ``None`` where it cannot be read."""
    if np.dtype(PETSc.RealType) != np.float64:
        return None
    try:
        F = sub.getFactorMatrix()
        lib = ctypes.CDLL(PETSc.__file__)  # its symbols resolve through libpetsc
        get = lib.MatFactorGetErrorZeroPivot
        pivot = ctypes.c_double()
        row = (ctypes.c_int64 if np.dtype(PETSc.IntType).itemsize == 8 else ctypes.c_int32)()
        get.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double),
                        ctypes.POINTER(type(row))]
        if get(ctypes.c_void_p(F.handle), ctypes.byref(pivot), ctypes.byref(row)) != 0:
            return None
        return float(pivot.value), int(row.value)
    except (OSError, AttributeError, TypeError, ValueError, PETSc.Error):
        return None


def _diagnose(ksp: PETSc.KSP, rows: np.ndarray) -> str:
    """Where the block of ``ksp`` (global rows ``rows``, sorted, as PCASM orders them) is
    singular: rows with a zero or missing diagonal entry, else the row of PETSc's own zero
    pivot mapped back through the factorisation's ordering (in the matrix's numbering)."""
    B = ksp.getOperators()[1]
    d = B.getDiagonal()
    diag = d.getArray(readonly=True).copy()
    d.destroy()
    scale = max(B.norm(PETSc.NormType.INFINITY), np.finfo(float).tiny)
    zero = np.flatnonzero(np.abs(diag) <= 1e-14 * scale)
    if len(zero):
        shown = zero[:_ROWS_SHOWN]
        names = ", ".join(f"{int(rows[j])}" + ("" if np.any(B.getRow(int(j))[1]) else
                                               " (a zero row)") for j in shown)
        more = f" and {len(zero) - len(shown)} more" if len(zero) > len(shown) else ""
        return (f"row{'s' if len(zero) > 1 else ''} {names}{more} of the matrix "
                f"{'have' if len(zero) > 1 else 'has'} a zero or missing diagonal entry")
    sub = ksp.getPC()
    # PETSc's own LU records the step of its zero pivot (its Cholesky does not, reliably)
    if sub.getType() != "lu" or sub.getFactorSolverType() != "petsc":
        return ""
    found = _petsc_zero_pivot(sub)
    if found is None or not 0 <= found[1] < len(rows):
        return ""
    pivot, step = found
    ordering = PETSc.Options(sub.getOptionsPrefix() or "").getString(
        "pc_factor_mat_ordering_type", "nd")
    try:
        perm, cols = B.getOrdering(ordering)
        j = int(perm.getIndices()[step])
        perm.destroy(), cols.destroy()
    except PETSc.Error:
        return ""
    return f"PETSc's LU met the zero pivot {pivot:.3g} at row {int(rows[j])} of the matrix"


def factor_blocks(pc: PETSc.PC, subdomains, solver: str = "auto") -> LocalFactorisation | None:
    """Factor the local blocks of the set-up PCASM ``pc`` on ``subdomains`` (the solver of
    :func:`exact_local_solves`), each rank its own, then check every block on every rank
    (collective): a block whose factorisation failed (a PETSc error, or a zero pivot PETSc
    records without one) raises the same ``ValueError`` on every rank, naming the subdomain
    (its global id), the rows of the matrix that make it singular where they can be found, and
    the fix. Returns what the blocks use."""
    chosen = exact_local_solves(pc, solver)
    prefix = pc.getOptionsPrefix() or ""
    subs = pc.getASMSubKSP()
    failed = []
    for k, ksp in enumerate(subs):
        error = None
        try:
            ksp.setUp()
        except PETSc.Error as e:
            error = e
        reason = int(ksp.getPC().getFailedReason())
        if error is None and reason == 0 and ksp.getConvergedReason() >= 0:
            continue
        failed.append((k, error, reason))
    report = []
    if failed:
        ids = _subdomain_ids(subdomains, len(subs))
        sets = subdomains.index_sets(True)
        rows = [np.sort(s.getIndices()) for s in sets]
        for s in sets:
            s.destroy()
        rank = pc.getComm().getRank()
        for k, error, reason in failed:
            sub = subs[k].getPC()
            what = _FAILED.get(reason, "")
            if error is not None:
                lines = [ln.split("] ", 1)[-1].strip() for ln in str(error).splitlines()]
                message = [ln for ln in lines[1:] if ln and " at " not in ln and "()" not in ln]
                petsc = f"PETSc error {error.ierr}" + (f": {'; '.join(message)}" if message
                                                       else "")
                text = petsc.lower()
                what = what or (_FAILED[1] if "missing diagonal" in text else
                                _FAILED[2] if "zero pivot" in text else "")
                what = f"{what} ({petsc})" if what else petsc
            what = what or _FAILED[4]
            kind = f"{sub.getType()} ({sub.getFactorSolverType() or 'its default'})" \
                if sub.getType() in ("lu", "cholesky") else sub.getType()
            where = _diagnose(subs[k], rows[k])
            report.append((f"subdomain {ids[k]} (rank {rank}, {len(rows[k])} rows, {kind}): "
                           f"{what}" + (f"; {where}" if where else ""),
                           sub.getFactorSolverType() if sub.getType() in ("lu", "cholesky")
                           else "petsc"))
    every = [m for part in pc.getComm().tompi4py().allgather(report) for m in part]
    # only PETSc's own factorisations shift their pivots (CHOLMOD stops, MUMPS has its own)
    others = sorted({package for _, package in every} - {None, "petsc"})
    shift = f": -{prefix}sub_pc_factor_shift_type nonzero" if not others else \
        f" with PETSc's own factorisation ({', '.join(others)} does not shift them): " \
        f"-{prefix}sub_pc_factor_mat_solver_type petsc -{prefix}sub_pc_factor_shift_type nonzero"
    collective_check(pc.getComm(), not every,
                     f"the factorisation of {len(every)} local block"
                     f"{'s' if len(every) != 1 else ''} A_i = R_i A R_i^T failed: "
                     f"{' | '.join(m for m, _ in every)}. A block is singular where the matrix "
                     f"is (a zero row or column, a zero diagonal entry) or where a subdomain "
                     f"sees no boundary condition of a singular problem, and PETSc's own "
                     f"factorisations need every diagonal entry stored: check the matrix; as a "
                     f"last resort against a zero pivot, shift the local pivots{shift}")
    pc.setUpOnBlocks()  # PCASM's own bookkeeping; the blocks are factored already
    return chosen


def asm_pc(A: PETSc.Mat, subdomains, variant: str = "basic", prefix: str = "",
           solver: str = "auto", factor: bool = True) -> PETSc.PC:
    """A set-up stand-alone one-level Schwarz PC for ``A`` on ``subdomains`` (exact local
    solves by default, the factorisation ``solver`` of :func:`local_factorisation`, the blocks
    factored and checked by :func:`factor_blocks`), reading options under ``prefix``. A later
    ``setOperators`` + ``setUp`` + :func:`factor_blocks` with new values of the same structure
    refactors the blocks and reuses the rest. With ``factor=False`` the blocks are extracted and their
    factorisation chosen, not run: :func:`factor_blocks` runs it (in between, a coarse space
    may share it, :mod:`~ddlearn.classical.shared_factor`)."""
    pc = PETSc.PC().create(comm=A.getComm())
    pc.setOptionsPrefix(prefix)
    pc.setOperators(A, A)
    _set_subdomains(pc, subdomains, variant)
    pc.setFromOptions()
    pc.setUp()
    if not factor:
        exact_local_solves(pc, solver)
        return pc
    try:  # factor now, so that set-up time is set-up time
        factor_blocks(pc, subdomains, solver)
    except ValueError:
        pc.destroy()  # collective: every rank raised the same error
        raise
    return pc

