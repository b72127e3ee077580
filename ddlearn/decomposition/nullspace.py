r"""The near-null space :math:`Z` of the operator, this rank's rows: what the coarse spaces must
contain for a two-level method to be scalable (the constants for scalar diffusion, the
rigid-body modes for elasticity).

Sources, in PETSc's idiom:

- ``matrix``: the near-null space set on the matrix with ``MatSetNearNullSpace`` (as GAMG and
  PETSc's GDSW read it), plus the constant if it says so;
- ``rigid_body``: the rigid-body modes from the nodes' coordinates
  (``MatNullSpaceCreateRigidBody``; block size = dimension);
- ``constant``: per component of a node the constant (block size :math:`b`: :math:`b` vectors).

``auto`` (the default) takes the matrix's when it has one, else the constants.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from .collective import collective_check

__all__ = ["NULL_SPACES", "near_null_space"]

NULL_SPACES = ("auto", "matrix", "rigid_body", "constant")


def _from_matrix(A: PETSc.Mat) -> np.ndarray | None:
    ns = A.getNearNullSpace()
    if not ns:
        return None
    nlocal = A.getLocalSize()[0]
    cols = [np.ones(nlocal)] if ns.hasConstant() else []
    for v in ns.getVecs():
        collective_check(A.getComm(), v.getLocalSize() == nlocal,
                         f"a near-null space vector has {v.getLocalSize()} local entries but the "
                         f"matrix has {nlocal} local rows: create its vectors with "
                         f"A.createVecLeft() (MatCreateVecs)")
        cols.append(v.getArray(readonly=True).copy())
    return np.stack(cols, axis=1) if cols else None


def _rigid_body(A: PETSc.Mat, coordinates: np.ndarray | None, bs: int,
                prefix: str) -> np.ndarray:
    comm = A.getComm()
    has = coordinates is not None
    collective_check(comm, comm.tompi4py().allreduce(has, op=min),
                     f"-{prefix}near_null_space rigid_body needs the nodes' coordinates: attach "
                     f"them with ddlearn.pc.set_coordinates")
    nlocal = A.getLocalSize()[0]
    X = np.asarray(coordinates, dtype=np.float64)
    X = X[::bs] if X.shape[0] == nlocal and bs > 1 else X
    collective_check(comm, X.shape[0] * bs == nlocal and X.shape[1] == bs and bs in (2, 3),
                     f"rigid-body modes need block size = dimension (2 or 3) and one coordinate "
                     f"row per node; got block size {bs} and coordinates {X.shape}")
    c = PETSc.Vec().createMPI((X.size, PETSc.DECIDE), bsize=bs, comm=comm)
    c.setArray(X.ravel())
    ns = PETSc.NullSpace().createRigidBody(c)
    Z = np.stack([v.getArray(readonly=True).copy() for v in ns.getVecs()], axis=1)
    ns.destroy()
    c.destroy()
    return Z


def near_null_space(A: PETSc.Mat, kind: str = "auto", coordinates: np.ndarray | None = None,
                    block_size: int = 1, prefix: str = "ddlearn_") -> np.ndarray | None:
    """This rank's rows of :math:`Z`, shape ``(local rows, m)``; ``None`` for the plain
    constant of a scalar problem (collective; a bad request fails on every rank, naming the
    option under ``prefix``, the PC's prefix + ``ddlearn_``)."""
    collective_check(A.getComm(), kind in NULL_SPACES,
                     f"unknown -{prefix}near_null_space {kind!r}; choose one of "
                     f"{', '.join(NULL_SPACES)}")
    if kind in ("auto", "matrix"):
        Z = _from_matrix(A)
        collective_check(A.getComm(), Z is not None or kind == "auto",
                         f"-{prefix}near_null_space matrix, but the matrix has none: set it "
                         f"with MatSetNearNullSpace (A.setNearNullSpace)")
        if Z is not None:
            return Z
    if kind == "rigid_body":
        return _rigid_body(A, coordinates, block_size, prefix)
    if block_size == 1:
        return None
    nlocal = A.getLocalSize()[0]
    return np.kron(np.ones((nlocal // block_size, 1)), np.eye(block_size))
