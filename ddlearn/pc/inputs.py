r"""What a PETSc user hands a domain-decomposition preconditioner, attached to the PC or to the
matrix before the set-up (every rank calls each helper for its own share), in PETSc's idiom:

- :func:`set_coordinates`: the coordinates of this rank's rows or nodes (``pc.setCoordinates``
  does not reach a Python PC in petsc4py 3.26; a DM with coordinates on the KSP works too);
- :func:`set_subdomains`: this rank's subdomains, like ``PCASMSetLocalSubdomains``;
- :func:`set_auxiliary_matrices`: their local Neumann matrices, like
  ``PCHPDDMSetAuxiliaryMat``.

The block size and the near-null space travel on the matrix itself (``MatSetBlockSize``,
``MatSetNearNullSpace``). Everything is composed as PETSc objects, so a C program can attach
them with ``PetscObjectCompose`` under the same names.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from ..decomposition.collective import collective_check
from ..decomposition.petsc_rows import sequential_aij

__all__ = ["set_coordinates", "get_coordinates", "set_subdomains", "user_subdomains",
           "set_auxiliary_matrices", "user_auxiliary"]

_COORDINATES = "ddlearn_coordinates"
_SUBDOMAINS = {True: "ddlearn_subdomains_overlapping", False: "ddlearn_subdomains_parts"}
_OFFSETS = "ddlearn_subdomain_offsets"
_AUXILIARY = "ddlearn_auxiliary_"


def set_coordinates(obj: PETSc.Object, coords: np.ndarray) -> None:
    """Attach the coordinates of this rank's rows (or nodes), shape ``(nlocal, dim)``, to a PC
    or a Mat (collective in the sense that every rank calls it for its rows)."""
    coords = np.ascontiguousarray(coords, dtype=np.float64)
    if coords.ndim != 2:
        raise ValueError(f"coordinates must have shape (local rows, dim), got {coords.shape}")
    v = PETSc.Vec().createMPI((coords.size, PETSc.DECIDE), bsize=coords.shape[1],
                              comm=obj.getComm())
    v.setArray(coords.ravel())
    obj.compose(_COORDINATES, v)
    v.destroy()


def get_coordinates(pc: PETSc.PC, P: PETSc.Mat) -> np.ndarray | None:
    """This rank's rows' coordinates from :func:`set_coordinates` on the PC or the matrix, or
    from the PC's DM; ``None`` when there are none."""
    for obj in (pc, P):
        v = obj.query(_COORDINATES)
        if v is not None:
            return v.getArray(readonly=True).reshape(-1, v.getBlockSize()).copy()
    dm = pc.getDM()
    if not dm:  # no DM: petsc4py wraps a null handle
        return None
    c = dm.getCoordinates()
    if not c or c.getSize() == 0:
        return None
    return c.getArray(readonly=True).reshape(-1, dm.getCoordinateDim()).copy()


def set_subdomains(obj: PETSc.Object, sets, overlapping: bool = True) -> None:
    """This rank's subdomains, one index array (or ``IS``) of global rows each, any rank's
    rows, like ``PCASMSetLocalSubdomains``, on a PC or a Mat: the overlapping subdomains, or
    (``overlapping=False``) non-overlapping parts that the PC grows by ``-ddlearn_overlap``
    layers. Every rank calls it, with at least one set."""
    arrays = [np.asarray(s.getIndices() if isinstance(s, PETSc.IS) else s, dtype=np.int64)
              for s in sets]
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])])
    for key, values in ((_SUBDOMAINS[overlapping], flat), (_OFFSETS, offsets)):
        iset = PETSc.IS().createGeneral(values.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
        obj.compose(key, iset)
        iset.destroy()
    obj.compose(_SUBDOMAINS[not overlapping], None)


def user_subdomains(pc: PETSc.PC, P: PETSc.Mat):
    """``(sets, overlapping)`` from :func:`set_subdomains` on the PC or the matrix, or
    ``None``."""
    for obj in (pc, P):
        for overlapping, key in _SUBDOMAINS.items():
            flat = obj.query(key)
            if flat is not None:
                offsets = obj.query(_OFFSETS).getIndices()
                return np.split(flat.getIndices().astype(np.int64), offsets[1:-1]), overlapping
    return None


def set_auxiliary_matrices(obj: PETSc.Object, mats) -> None:
    """The local Neumann matrices of this rank's subdomains given to :func:`set_subdomains`
    (same order; scipy sparse or sequential PETSc matrices), rows and columns in the order of
    that subdomain's indices as given, like ``PCHPDDMSetAuxiliaryMat``: what ``spectral`` and
    ``learned`` use instead of the algebraic approximation."""
    k = 0
    while obj.query(f"{_AUXILIARY}{k}") is not None:  # forget an earlier call's matrices
        obj.compose(f"{_AUXILIARY}{k}", None)
        k += 1
    for k, M in enumerate(mats):
        M = M if isinstance(M, PETSc.Mat) else sequential_aij(M)
        obj.compose(f"{_AUXILIARY}{k}", M)


def _auxiliary_matrices(pc: PETSc.PC, P: PETSc.Mat) -> list[sp.csr_matrix] | None:
    for obj in (pc, P):
        mats, k = [], 0
        while (M := obj.query(f"{_AUXILIARY}{k}")) is not None:
            indptr, indices, values = M.getValuesCSR()
            mats.append(sp.csr_matrix((values, indices, indptr), shape=M.getSize()))
            k += 1
        if mats:
            return mats
    return None


def user_auxiliary(pc: PETSc.PC, P: PETSc.Mat, subdomains):
    """The user's auxiliary matrices of ``subdomains`` (from :func:`set_subdomains`), permuted into
    the sorted order of each :math:`I_i`; ``None`` when none were given (collective)."""
    comm = pc.getComm()
    aux = _auxiliary_matrices(pc, P)
    given = comm.tompi4py().allreduce(aux is not None, op=MPI.LOR)
    if not given:
        return None
    s = subdomains
    collective_check(comm, s.orders is not None,
                     "auxiliary (Neumann) matrices were given without the overlapping "
                     "subdomains they belong to: call ddlearn.pc.set_subdomains(pc or A, "
                     "sets, overlapping=True) with the subdomains the matrices were "
                     "assembled on")
    collective_check(comm, aux is not None and len(aux) == len(s.overlapping),
                     f"{0 if aux is None else len(aux)} auxiliary matrices for this rank's "
                     f"{len(s.overlapping)} subdomains: give one per subdomain, in the order "
                     f"of ddlearn.pc.set_subdomains")
    bad = [k for k, (a, o) in enumerate(zip(aux, s.orders)) if a.shape != (len(o), len(o))]
    collective_check(comm, not bad,
                     f"auxiliary matrices {bad} of this rank do not match their subdomains' "
                     f"sizes: each must be square, of its subdomain's size, numbered like "
                     f"the indices given to set_subdomains")
    return [a[o][:, o].tocsr() for a, o in zip(aux, s.orders)]
