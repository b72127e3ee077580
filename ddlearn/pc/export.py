r"""A learned preconditioner in a PETSc-native, versioned binary file, for programs in any
language that link PETSc.

The file holds everything :math:`M_\theta^{-1} = \sum_i R_i^T A_i^{-1} R_i + \tilde\Phi\,
(\tilde\Phi^TA\tilde\Phi)^{-1}\tilde\Phi^T` needs besides the user's matrix ``A`` (from which a
reader forms :math:`A_i` and :math:`\tilde A_0`), in *natural* (problem) numbering, 0-based, as
consecutive PETSc binary objects (``PetscViewerBinaryOpen`` + ``VecLoad``/``ISLoad``/``MatLoad``):

====  ======  =================================================================================
 #    object  content
====  ======  =================================================================================
 1    Vec     header, 8 reals: ``MAGIC``, ``VERSION``, n, N, n_0, mode (0 = ``basic``: SPD, for
              CG; 1 = ``restrict``: RAS, for GMRES), overlap, 0 (reserved)
 2    IS      offsets of the overlapping index sets, length N + 1
 3    IS      overlapping index sets :math:`I_i`, concatenated, each sorted
 4    IS      offsets of the owned (non-overlapping) sets, length N + 1
 5    IS      owned sets, concatenated, each sorted (the RAS restriction :math:`\tilde R_i`)
 6    Mat     :math:`\tilde\Phi`, n × n_0, AIJ
====  ======  =================================================================================

A reader on P ≤ N ranks gives rank r the subdomains of :func:`ddlearn.decomposition.assign_ranks`
(or any assignment: the operator does not depend on it). Version 1.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ..decomposition.petsc_rows import sequential_aij
from ..decomposition.problems import make_problem
from ..learned.operators import checkpoint as ckpt_io
from ..learned.coarse.basis import INSITU_KIND, VARIANTS, LearnedBasis

__all__ = ["MAGIC", "VERSION", "export", "export_checkpoint", "read", "NativeExport"]

MAGIC = 20261129.0
VERSION = 1
_MODES = {"learned": 0, "learned_restricted": 1}


def _is(values) -> PETSc.IS:
    return PETSc.IS().createGeneral(np.asarray(values, dtype=PETSc.IntType), comm=PETSc.COMM_SELF)


def _concat(sets):
    sets = [np.sort(np.asarray(s)) for s in sets]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    return offsets, np.concatenate(sets)


def export(path: str, basis: LearnedBasis, mode: str = "learned") -> None:
    r"""Write the learned preconditioner of a *serial*
    :class:`~ddlearn.learned.coarse.basis.LearnedBasis` (:meth:`LearnedBasis.serial`, natural
    ordering) to ``path`` (this process only)."""
    if mode not in _MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(_MODES)}")
    dec = basis.S.dec
    Phi = sp.csr_matrix(basis.to_scipy())
    Phi.sort_indices()
    if Phi.shape[0] != dec.n:
        raise ValueError(f"export needs a serial basis with all {dec.n} rows, got {Phi.shape[0]}")
    header = np.array([MAGIC, VERSION, dec.n, dec.N, Phi.shape[1], _MODES[mode], dec.overlap, 0.0])
    objects = [PETSc.Vec().createWithArray(header, comm=PETSc.COMM_SELF)]
    for sets in (dec.subdomains, dec.owned):
        offsets, flat = _concat(sets)
        objects += [_is(offsets), _is(flat)]
    objects.append(sequential_aij(Phi))
    viewer = PETSc.Viewer().createBinary(path, "w", comm=PETSc.COMM_SELF)
    try:
        for o in objects:
            o.view(viewer)
    finally:
        viewer.destroy()
        for o in objects:
            o.destroy()


def export_checkpoint(checkpoint: str, problem, path: str, mode: str = "learned") -> None:
    """Export a learned-preconditioner checkpoint (as the example caches them) for ``problem``.

    Raises ``ValueError`` for a checkpoint of another kind or problem."""

    S, meta = ckpt_io.load(checkpoint, problem=problem.describe())
    if meta.get("preconditioner") != INSITU_KIND:
        raise ValueError(f"{checkpoint} is not a learned-preconditioner checkpoint (kind {INSITU_KIND})")
    export(path, LearnedBasis.serial(S, problem, meta["coarse"], meta.get("smoothing")), mode)


@dataclass
class NativeExport:
    """What :func:`read` returns: the header fields, the index sets (natural numbering) and
    :math:`\\tilde\\Phi` as a PETSc matrix distributed over the reader's communicator."""

    n: int
    N: int
    n0: int
    mode: str
    overlap: int
    subdomains: list
    owned: list
    Phi: PETSc.Mat

    @property
    def variant(self) -> str:
        return VARIANTS[self.mode]


def read(path: str, comm=None) -> NativeExport:
    """Read an exported preconditioner on ``comm`` (collective; errors on every rank)."""
    comm = PETSc.COMM_WORLD if comm is None else comm
    viewer = PETSc.Viewer().createBinary(path, "r", comm=comm)
    loaded = []
    try:
        header = PETSc.Vec().create(comm=comm)
        loaded.append(header)
        header.load(viewer)
        h = np.concatenate(comm.tompi4py().allgather(header.getArray(readonly=True).copy()))
        if len(h) != 8 or h[0] != MAGIC:
            raise ValueError(f"{path} is not a ddlearn native export (bad header)")
        if int(h[1]) != VERSION:
            raise ValueError(f"{path} has export version {int(h[1])}; this ddlearn reads version "
                             f"{VERSION}: export the model again")
        sets = []
        for _ in range(4):
            iset = PETSc.IS().create(comm=comm)
            loaded.append(iset)
            iset.load(viewer)
            sets.append(np.concatenate(comm.tompi4py().allgather(iset.getIndices())))
        Phi = PETSc.Mat().create(comm=comm)
        Phi.setType(PETSc.Mat.Type.AIJ)
        Phi.load(viewer)
    finally:
        viewer.destroy()
        for o in loaded:
            o.destroy()
    split = lambda offsets, flat: [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]  # noqa: E731
    mode = {v: k for k, v in _MODES.items()}[int(h[5])]
    return NativeExport(n=int(h[2]), N=int(h[3]), n0=int(h[4]), mode=mode, overlap=int(h[6]),
                        subdomains=split(*sets[:2]), owned=split(*sets[2:]), Phi=Phi)


def main(argv=None) -> None:
    """``python -m ddlearn.pc.export CHECKPOINT OUT -problem NAME -n N [-contrast C] [-mode M]``"""
    ap = argparse.ArgumentParser(prog="python -m ddlearn.pc.export", description=main.__doc__)
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("-problem", required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("-contrast", type=float, default=None)
    ap.add_argument("-mode", default="learned", choices=sorted(_MODES))
    args = ap.parse_args(argv)
    kwargs = {"contrast": args.contrast} if args.contrast is not None else {}
    export_checkpoint(args.checkpoint, make_problem(args.problem, args.n, **kwargs), args.out,
                      args.mode)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
