r"""``learned_insitu``: the learned basis :math:`\tilde\Phi = \Phi - \Omega\Psi + S_\theta\Phi`
of an in-situ checkpoint (:mod:`ddlearn.learned.coarse.basis`, trained inside CG on one matrix).

The checkpoint carries its own structured decomposition and is bound to the matrix it was
trained for: the space finds whether the matrix is in the grid's natural numbering or in
ddlearn's subdomain numbering (any row distribution) by the checkpoint's fingerprint, brings
its own subdomains (:meth:`LearnedInsitu.subdomains`), forms :math:`\tilde\Phi` in its internal
numbering and maps it back, and refuses any other matrix (also new values of the same matrix)
on every rank.

Options (``-<prefix>ddlearn_learned_insitu_``): ``model FILE`` (the checkpoint).
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ...classical.coarse_space import CoarseInput, CoarseSpace, CoarseVectors
from ...decomposition.coarse import grid_basis
from ...decomposition.collective import collective_check
from ...decomposition.subdomains import Subdomains
from .basis import INSITU_KIND, describe, distributed_basis, petsc_basis
from ..operators.distributed import DistributedSchwarzAttention

__all__ = ["LearnedInsitu"]

_NOT_THIS_MATRIX = ("the matrix is not the one this learned coarse space was trained for "
                    "(another problem, other coefficients, or an ordering other than the grid's "
                    "natural one or ddlearn's): train a model for this matrix")


def _same(now: np.ndarray, saved) -> bool:
    saved = np.asarray(saved)
    return bool(np.allclose(now, saved, rtol=1e-10, atol=1e-12 * np.abs(saved).max()))


class LearnedInsitu(CoarseSpace):
    """``model``: a checkpoint path or a :class:`DistributedSchwarzAttention` given in code."""

    name = "learned_insitu"
    value_dependent = True
    supports_blocks = False

    def __init__(self, model=None, coarse_rank: int = 0):
        super().__init__()
        self.model, self.coarse_rank = model, coarse_rank
        self.meta, self._rows = {}, None
        #: the PC's options prefix + ``ddlearn_`` (from :meth:`set_from_options`): messages
        #: name the options with it
        self._prefix = "ddlearn_"

    @property
    def _model_name(self) -> str:
        return self.model if isinstance(self.model, str) else "the model given in code"

    def set_from_options(self, prefix: str) -> None:
        self._prefix = prefix
        if not isinstance(self.model, DistributedSchwarzAttention):
            self.model = self.options(prefix).getString("model", self.model or "") or None

    def subdomains(self, A: PETSc.Mat) -> Subdomains:
        comm, prefix = A.getComm(), self._prefix
        collective_check(comm, self.model is not None,
                         f"-{prefix}coarse_space learned_insitu needs its checkpoint: give "
                         f"-{prefix}learned_insitu_model FILE")
        loaded = isinstance(self.model, str)
        collective_check(comm, not loaded or os.path.exists(self.model),
                         f"no in-situ learned checkpoint at {self.model}: give "
                         f"-{prefix}learned_insitu_model FILE (trained with "
                         f"ddlearn.learned.coarse.pc_training)")
        model = DistributedSchwarzAttention.load(self.model, comm=comm,
                                                 coarse_rank=self.coarse_rank) \
            if loaded else self.model
        try:
            collective_check(comm, model.meta.get("preconditioner") == INSITU_KIND,
                             f"{self._model_name} is a paper-form Schwarz attention operator, not "
                             f"a learned coarse space: use "
                             f"-{prefix.removesuffix('ddlearn_')}pc_python_type "
                             f"ddlearn.pc.SchwarzAttentionPC for it")
            layout = model.layout
            collective_check(comm, A.getSize()[0] == layout.n,
                             f"the matrix has {A.getSize()[0]} rows but the model was trained "
                             f"for {layout.n} unknowns (grid {list(layout.dec.grid)})")
            self.meta = dict(model.meta)
            to_global = self._ordering(A, layout)
            internal = PETSc.IS().createGeneral(
                to_global[layout.local_natural()].astype(PETSc.IntType), comm=comm)
            A_int = A.createSubMatrix(internal, internal)
            Phi = grid_basis(model.meta["coarse"], layout.dec)
            basis = distributed_basis(model, layout, A_int, Phi, model.meta.get("smoothing"))
            Phi_tilde = petsc_basis(basis, layout)
            # rows back to the user's numbering and distribution
            lo, hi = A.getOwnershipRange()
            from_global = np.empty_like(to_global)
            from_global[to_global] = np.arange(layout.n)
            user_rows = PETSc.IS().createGeneral(
                layout.iperm[from_global[lo:hi]].astype(PETSc.IntType), comm=PETSc.COMM_SELF)
            n0 = Phi_tilde.getSize()[1]
            every = PETSc.IS().createGeneral(np.arange(n0, dtype=PETSc.IntType),
                                             comm=PETSc.COMM_SELF)
            (mine,) = Phi_tilde.createSubMatrices(user_rows, every)
            indptr, indices, values = mine.getValuesCSR()
            self._rows = sp.csr_matrix((values, indices, indptr), shape=(hi - lo, n0))
            for o in (internal, A_int, Phi_tilde, user_rows, every, mine):
                o.destroy()
            self._to_global, self._layout = to_global, layout
            return Subdomains.from_layout(layout, to_global)
        finally:
            if loaded:
                model.destroy()

    def _ordering(self, A: PETSc.Mat, layout) -> np.ndarray:
        """``to_global``: the matrix row of each natural unknown, found by the fingerprint
        among the grid's natural numbering and ddlearn's subdomain numbering."""
        saved = self.meta.get("fingerprint")
        collective_check(A.getComm(), saved is not None,
                         f"{self._model_name} carries no matrix fingerprint, so the PC cannot "
                         f"check which matrix and numbering it serves: save it with "
                         f"ddlearn.learned.coarse.basis.learned_meta")
        for to_global in (np.arange(layout.n), layout.iperm):
            if _same(layout.fingerprint(A, to_global), saved):
                return to_global
        collective_check(A.getComm(), False, _NOT_THIS_MATRIX)

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        collective_check(inp.comm, _same(self._layout.fingerprint(inp.A, self._to_global),
                                         self.meta["fingerprint"]), _NOT_THIS_MATRIX)
        return CoarseVectors.from_rows(self._rows, inp.A.getOwnershipRange()[0])

    def describe(self) -> dict:
        return {"name": self.name, "model": self._model_name, **self.found}

    def view(self, viewer: PETSc.Viewer) -> None:
        viewer.printfASCII(f"  learned coarse space from {self._model_name}: "
                           f"{describe(self.meta)}\n")
