r"""The Galerkin coarse correction :math:`y = \Phi A_0^{-1}\Phi^T x`, :math:`A_0 = \Phi^TA\Phi`.

``Phi`` is a distributed matrix with the rows of ``A`` and all :math:`n_0` columns on the coarse
rank, so :math:`\Phi^T x` lands there, the coarse rank alone solves with its sequential
factorisation of :math:`A_0`, and :math:`\Phi` sends the result back. Structure
(:meth:`CoarseCorrection.__init__`: the triple product's pattern, the coarse KSP) is separate
from values (:meth:`CoarseCorrection.update`: numeric triple product and refactorisation), so a
matrix with new values of the same structure reuses everything but the numbers.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

__all__ = ["CoarseCorrection"]


class CoarseCorrection:
    """See the module docstring. The coarse solver is a KSP with prefix ``{prefix}coarse_``
    (default: preonly + Cholesky), a nested PETSc object that ``-ksp_view`` shows.

    Parameters
    ----------
    A : PETSc.Mat
    Phi : PETSc.Mat
        Coarse basis, rows distributed like ``A``, all columns on ``coarse_rank``.
    """

    def __init__(self, A: PETSc.Mat, Phi: PETSc.Mat, coarse_rank: int = 0, prefix: str = ""):
        self.Phi = Phi
        comm = A.getComm()
        self.is_coarse = comm.getRank() == coarse_rank
        self._A0 = A.ptap(Phi)
        n0 = self._A0.getSize()[0]
        # Only the coarse rank asks for rows, so only it receives the sequential A_0.
        want = np.arange(n0 if self.is_coarse else 0, dtype=PETSc.IntType)
        self._rows = PETSc.IS().createGeneral(want, comm=PETSc.COMM_SELF)
        (self.A0,) = self._A0.createSubMatrices(self._rows)
        self.xc, self.yc = Phi.createVecRight(), Phi.createVecRight()
        self.ksp = self._xs = self._ys = None
        if self.is_coarse:
            self.ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
            self.ksp.setOptionsPrefix(prefix + "coarse_")
            self.ksp.setType(PETSc.KSP.Type.PREONLY)
            self.ksp.getPC().setType(PETSc.PC.Type.CHOLESKY)
            self.ksp.setOperators(self.A0)
            self.ksp.setFromOptions()
            self.ksp.setUp()
            # Sequential views of the coarse vectors' storage (all n_0 entries are local here).
            self._xs = PETSc.Vec().createWithArray(self.xc.getArray(), comm=PETSc.COMM_SELF)
            self._ys = PETSc.Vec().createWithArray(self.yc.getArray(), comm=PETSc.COMM_SELF)

    @property
    def n0(self) -> int:
        return self.Phi.getSize()[1]

    def update(self, A: PETSc.Mat) -> None:
        r"""New values of ``A`` (same structure): numeric :math:`\Phi^TA\Phi` into the existing
        matrices and a numeric refactorisation (collective)."""
        A.ptap(self.Phi, result=self._A0)
        self._A0.createSubMatrices(self._rows, submats=[self.A0])
        if self.is_coarse:
            self.ksp.setOperators(self.A0)
            self.ksp.setUp()

    def apply(self, x: PETSc.Vec, y: PETSc.Vec, add: bool = False) -> None:
        r"""``y = Phi A_0^{-1} Phi^T x`` (or ``y += ...`` with ``add``)."""
        self.Phi.multTranspose(x, self.xc)
        if self.is_coarse:
            self.ksp.solve(self._xs, self._ys)
        if add:
            self.Phi.multAdd(self.yc, y, y)
        else:
            self.Phi.mult(self.yc, y)

    def view(self, viewer: PETSc.Viewer) -> None:
        if self.is_coarse:
            self.ksp.view(viewer)

    def destroy(self) -> None:
        for obj in (self.ksp, self._xs, self._ys, self._rows, self._A0, self.A0, self.xc,
                    self.yc):
            if obj is not None:
                obj.destroy()
