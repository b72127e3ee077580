r"""The Galerkin coarse correction :math:`y = \Phi A_0^{-1}\Phi^T x`, :math:`A_0 = \Phi^TA\Phi`.

``Phi`` is a distributed matrix with the rows of ``A`` and its :math:`n_0` columns on the coarse
rank(s) (:func:`~ddlearn.classical.coarse_space.coarse_basis`), so :math:`\Phi^T x` lands there,
only those ranks solve, and :math:`\Phi` sends the result back. Which ranks they are is read off
``Phi``'s column ownership, so there is one source of truth:

- one coarse rank: :math:`A_0` is gathered there as a sequential matrix and the coarse KSP lives
  on ``COMM_SELF`` (default preonly + Cholesky, CHOLMOD's where the build has it);
- :math:`P > 1` coarse ranks: :math:`A_0` keeps the rows ``Phi``'s columns give each of them, as a
  parallel matrix on their sub-communicator, where the coarse KSP lives (default preonly +
  ``PCREDUNDANT``: every coarse rank gathers :math:`A_0` and factors it, PETSc's default LU,
  because this PETSc has no parallel direct solver, MUMPS or SuperLU_DIST; the solve stays exact,
  so the iterations are those of one coarse rank). Any other fixed linear solver can be chosen
  from the options, e.g. ``-ddlearn_coarse_pc_type bjacobi`` (inexact, scalable) or a nested
  ``ddlearn.pc.TwoLevelSchwarzPC`` (a three-level method). The other ranks skip the solve.

The coarse KSP's options prefix is ``{prefix}coarse_``. Structure (:meth:`CoarseCorrection.__init__`:
the triple product's pattern, the coarse matrix and KSP) is separate from values
(:meth:`CoarseCorrection.update`: numeric triple product, the same matrix objects refilled and
the coarse KSP set up again), so a matrix with new values of the same structure reuses
everything but the numbers, the coarse KSP's own structure included.

The outer method sees :math:`\Phi A_0^{-1}\Phi^T` as a fixed symmetric linear map only when the
coarse KSP is one (:attr:`CoarseCorrection.symmetric`): preonly with a symmetric PC, or Chebyshev
or Richardson with ``-..._ksp_norm_type none`` (a fixed number of iterations). A
tolerance-driven inner Krylov method changes with the right-hand side and needs a flexible outer
method (fcg, fgmres, gcr).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from ..decomposition.collective import collective_check
from ..decomposition.petsc_rows import (column_groups, distributed_aij, set_column_groups,
                                    take_galerkin)
from ..decomposition.timing import Timer
from .overlapping import available_local_solvers
from .splitting import attach, send_to_owners

__all__ = ["CoarseCorrection", "fixed_linear", "wants_splitting"]

#: inner Krylov methods that are a fixed linear map when they run a fixed number of iterations
_FIXED_WHEN_UNNORMED = (PETSc.KSP.Type.CHEBYSHEV, PETSc.KSP.Type.RICHARDSON)


def _python_context(ksp: PETSc.KSP):
    """The context of the KSP's PC when it is a Python PC (a nested level), else ``None``."""
    pc = ksp.getPC()
    return pc.getPythonContext() if pc.getType() == PETSc.PC.Type.PYTHON else None


def fixed_linear(ksp: PETSc.KSP) -> bool:
    """Whether ``ksp`` applies a fixed symmetric linear map (what CG needs of a preconditioner):
    preonly, or Chebyshev/Richardson without a norm (so without a convergence test, always
    ``max_it`` iterations), with a PC that does not declare itself nonsymmetric."""
    kind = ksp.getType()
    fixed = kind == PETSc.KSP.Type.PREONLY or (
        kind in _FIXED_WHEN_UNNORMED and ksp.getNormType() == PETSc.KSP.NormType.NONE)
    return fixed and getattr(_python_context(ksp), "symmetric", True) is not False


def wants_splitting(ksp: PETSc.KSP) -> bool:
    """Whether the coarse KSP's PC is a nested level that builds a spectral coarse space from
    the level above's Neumann matrices (its context's ``needs_splitting``)."""
    return bool(getattr(_python_context(ksp), "needs_splitting", False))


def _message(error: Exception) -> str:
    """The readable part of an error raised inside PETSc: petsc4py wraps an exception of a
    Python PC in a ``PETSc.Error`` whose cause carries the message."""
    chain = []
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    ours = [str(e) for e in chain if not isinstance(e, PETSc.Error)]
    return "; ".join(ours) if ours else str(chain[0])


class CoarseCorrection:
    """See the module docstring. The coarse solver is a KSP with prefix ``{prefix}coarse_``, a
    nested PETSc object that ``-ksp_view`` shows.

    Parameters
    ----------
    A : PETSc.Mat
    Phi : PETSc.Mat
        Coarse basis, rows distributed like ``A``, columns on the coarse rank(s) in contiguous
        blocks (optionally carrying its column groups, which :math:`A_0` then carries too).
    prefix : str
        The options prefix the coarse KSP's ``coarse_`` is appended to.
    level_above : callable, optional
        Returns this rank's pieces of :math:`A_0`'s splitting
        (:func:`~.splitting.galerkin_splitting`; collective), called only when the coarse PC is
        a nested level that asks for them (:func:`wants_splitting`: a spectral space on
        :math:`A_0`, multilevel GenEO); they are composed on :math:`A_0` before its set-up, and
        again on every update.

    Attributes
    ----------
    ranks : tuple of int
        The coarse ranks (those owning columns of ``Phi``).
    symmetric : bool
        Whether the coarse KSP is a fixed symmetric linear map (:func:`fixed_linear`; the same on
        every rank).
    solver : str
        The coarse KSP's and PC's types, ``"preonly/cholesky"`` (every rank).
    timing : dict
        Set-up seconds (slowest rank): ``coarse_product_s`` (:math:`\\Phi^TA\\Phi`, and the
        gather or copy of :math:`A_0`), ``coarse_setup_s`` (the coarse KSP's set-up:
        factorisation, or the nested method's set-up).
    tally : Timer
        Seconds of the applies on this rank since the set-up (:math:`\\Phi^Tx`, coarse solve,
        :math:`\\Phi y`).
    """

    def __init__(self, A: PETSc.Mat, Phi: PETSc.Mat, prefix: str = "", level_above=None):
        self.Phi = Phi
        comm = A.getComm()
        mpi = comm.tompi4py()
        ranges = np.asarray(Phi.getOwnershipRangesColumn(), dtype=np.int64)
        self.ranks = tuple(int(r) for r in np.flatnonzero(np.diff(ranges))) or (0,)
        self.is_coarse = comm.getRank() in self.ranks
        self.ksp = self._xs = self._ys = self._rows = self.A0 = self._sub = None
        self.symmetric, self.solver, self.tally = True, "", Timer("coarse")
        clock = Timer()
        # the coarse space's own A_0 where it has a cheaper way to it, else the product
        given = take_galerkin(Phi)
        self._A0, self._product = (given, False) if given is not None else (A.ptap(Phi), True)
        n0 = self._A0.getSize()[0]
        if len(self.ranks) == 1:
            # Only the coarse rank asks for rows, so only it receives the sequential A_0.
            want = np.arange(n0 if self.is_coarse else 0, dtype=PETSc.IntType)
            self._rows = PETSc.IS().createGeneral(want, comm=PETSc.COMM_SELF)
            (self.A0,) = self._A0.createSubMatrices(self._rows)
            sub = PETSc.COMM_SELF
        else:
            # A_0 on the coarse ranks alone, so that the coarse KSP's collectives involve them
            # only; the others get COMM_NULL.
            self._sub = mpi.Split(0 if self.is_coarse else MPI.UNDEFINED, comm.getRank())
            sub = PETSc.Comm(self._sub) if self.is_coarse else None
            if self.is_coarse:
                self.A0 = distributed_aij(self._local_rows(), n0, np.append(
                    ranges[list(self.ranks)], n0), sub)
        groups = column_groups(Phi)
        if self.A0 is not None and groups is not None:
            set_column_groups(self.A0, groups)  # what a nested two-level PC groups by
        self.xc, self.yc = Phi.createVecRight(), Phi.createVecRight()
        clock.lap("coarse_product_s")
        self._level_above, self.wants_splitting = level_above, False
        what = (f"the coarse solver (options prefix -{prefix}coarse_, n_0 = {n0} coarse "
                f"unknowns on {len(self.ranks)} rank(s)) could not be set up")
        self._collective(A, what, lambda: self._coarse_solver(prefix, sub))
        self.wants_splitting = mpi.bcast(self.is_coarse and wants_splitting(self.ksp),
                                         root=self.ranks[0])
        self._attach_splitting(A)
        self._collective(A, what, self._set_up)
        self.symmetric, self.solver = mpi.bcast((self.symmetric, self.solver),
                                                root=self.ranks[0])
        clock.lap("coarse_setup_s")
        self.timing = clock.slowest(comm)

    def _collective(self, A: PETSc.Mat, what: str, step) -> None:
        """Run ``step`` on the coarse ranks; a failure on one stops every rank with its
        message, the objects destroyed first (collective)."""
        error = None
        if self.is_coarse:
            try:
                step()
            except Exception as e:  # any failure, so that it reaches every rank
                error = f"{what}: {_message(e)}"
        try:
            collective_check(A.getComm(), error is None, str(error))
        except ValueError:
            self.destroy()  # collective, on every rank, before the error leaves
            raise

    def _attach_splitting(self, A: PETSc.Mat) -> None:
        r"""The level above's pieces :math:`(R_i\Phi)^TA_i^N(R_i\Phi)` composed on
        :math:`A_0` for a nested level that asks for them (:mod:`.splitting`; collective)."""
        if not self.wants_splitting:
            return
        collective_check(A.getComm(), self._level_above is not None,
                         "the coarse level's preconditioner asks for the level above's Neumann "
                         "matrices, and this level has none to give")
        pieces = send_to_owners(A.getComm(), self._level_above(),
                                np.asarray(self.Phi.getOwnershipRangesColumn()))
        if self.is_coarse:
            attach(self.A0, pieces)

    def _set_up(self) -> None:
        self.ksp.setOperators(self.A0)
        self.ksp.setUp()
        self.symmetric = fixed_linear(self.ksp)
        self.solver = f"{self.ksp.getType()}/{self.ksp.getPC().getType()}"

    def _local_rows(self) -> sp.csr_matrix:
        """This rank's rows of the distributed :math:`A_0` (global columns)."""
        indptr, indices, values = self._A0.getValuesCSR()
        return sp.csr_matrix((values, indices, indptr),
                             shape=(len(indptr) - 1, self._A0.getSize()[1]))

    def _coarse_solver(self, prefix: str, comm: PETSc.Comm) -> None:
        self.ksp = PETSc.KSP().create(comm=comm)
        self.ksp.setOptionsPrefix(prefix + "coarse_")
        self.ksp.setType(PETSc.KSP.Type.PREONLY)
        if comm.getSize() == 1:
            self.ksp.getPC().setType(PETSc.PC.Type.CHOLESKY)
            if "cholmod" in available_local_solvers():
                # the supernodal factorisation: PETSc's own Cholesky took 139 s, CHOLMOD 2.2 s,
                # on GDSW's n_0 = 20 380 of 3D elasticity (benchmarks/scaling.py, elasticity)
                self.ksp.getPC().setFactorSolverType("cholmod")
        else:
            self.ksp.getPC().setType(PETSc.PC.Type.REDUNDANT)
        self.ksp.setOperators(self.A0)
        self.ksp.setFromOptions()
        # Views of the coarse vectors' storage on the coarse communicator.
        size = (self.xc.getLocalSize(), self.xc.getSize())
        self._xs = PETSc.Vec().createWithArray(self.xc.getArray(), size=size, comm=comm)
        self._ys = PETSc.Vec().createWithArray(self.yc.getArray(), size=size, comm=comm)

    @property
    def n0(self) -> int:
        return self.Phi.getSize()[1]

    def update(self, A: PETSc.Mat) -> None:
        r"""New values of ``A`` (same structure): numeric :math:`\Phi^TA\Phi` into the existing
        matrices and the coarse KSP set up again on them: a numeric refactorisation, or a
        values-only re-setup of a nested method (collective)."""
        # A_0 handed over with the basis holds for the values the basis was built from: a
        # coarse space that does so is value-dependent, and the PC rebuilds it instead
        collective_check(A.getComm(), self._product, "new matrix values for a coarse basis "
                         "that came with its own coarse matrix: build the basis again")
        clock = Timer()
        A.ptap(self.Phi, result=self._A0)
        if self._rows is not None:
            self._A0.createSubMatrices(self._rows, submats=[self.A0])
        elif self.is_coarse:
            rows = self._local_rows()
            self.A0.setValuesCSR(rows.indptr.astype(PETSc.IntType),
                                 rows.indices.astype(PETSc.IntType), rows.data)
            self.A0.assemble()
        clock.lap("coarse_product_s")
        self._attach_splitting(A)
        if self.is_coarse:
            self.ksp.setOperators(self.A0)
            self.ksp.setUp()
        clock.lap("coarse_setup_s")
        self.timing = clock.slowest(A.getComm())
        self.tally = Timer("coarse")

    def apply(self, x: PETSc.Vec, y: PETSc.Vec, add: bool = False) -> None:
        r"""``y = Phi A_0^{-1} Phi^T x`` (or ``y += ...`` with ``add``)."""
        start = self.tally.start()
        self.Phi.multTranspose(x, self.xc)
        if self.is_coarse:
            self.ksp.solve(self._xs, self._ys)
        if add:
            self.Phi.multAdd(self.yc, y, y)
        else:
            self.Phi.mult(self.yc, y)
        self.tally.add("coarse", start)

    def view(self, viewer: PETSc.Viewer) -> None:
        """The coarse KSP, printed by the coarse ranks through a sub-viewer (collective on the
        viewer's communicator)."""
        sub = viewer.getSubViewer(self.ksp.getComm() if self.is_coarse else PETSc.COMM_SELF)
        if self.is_coarse:
            sub.pushASCIITab()
            self.ksp.view(sub)
            sub.popASCIITab()
        viewer.restoreSubViewer(sub)

    def destroy(self) -> None:
        for obj in (self.ksp, self._xs, self._ys, self._rows, self._A0, self.A0, self.xc,
                    self.yc):
            if obj is not None:
                obj.destroy()
        if self._sub is not None and self._sub != MPI.COMM_NULL:
            self._sub.Free()
        self.ksp = self._xs = self._ys = self._rows = self._A0 = self.A0 = self._sub = None
