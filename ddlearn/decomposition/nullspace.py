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

Whatever the source, the columns of :math:`Z` must be linearly independent (a coarse space built
from dependent columns has a singular coarse matrix :math:`\Phi^TA\Phi`): :func:`near_null_space`
measures the Gram matrix :math:`G = Z^TZ` (one reduction of :math:`m \times m` numbers) and
refuses, on every rank, a zero column or a column :math:`z_k` whose distance to the span of the
columns before it is at most ``1e-6`` of its norm,
:math:`G_{kk} - g_k^T G_{<k}^{-1} g_k \le 10^{-12}\, G_{kk}`.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from .collective import collective_check

__all__ = ["NULL_SPACES", "near_null_space", "dependent_columns"]

NULL_SPACES = ("auto", "matrix", "rigid_body", "constant")


#: squared sine of the angle below which a column counts as in the span of the ones before it
DEPENDENCE_TOL = 1e-12


def _from_matrix(A: PETSc.Mat) -> tuple[np.ndarray | None, list[str]]:
    """The matrix's near-null space as columns, with the name of each column."""
    ns = A.getNearNullSpace()
    if not ns:
        return None, []
    nlocal = A.getLocalSize()[0]
    cols = [np.ones(nlocal)] if ns.hasConstant() else []
    names = ["the constant (has_constant=True)"] if ns.hasConstant() else []
    for k, v in enumerate(ns.getVecs()):
        names.append(f"vector {k}")
        collective_check(A.getComm(), v.getLocalSize() == nlocal,
                         f"a near-null space vector has {v.getLocalSize()} local entries but the "
                         f"matrix has {nlocal} local rows: create its vectors with "
                         f"A.createVecLeft() (MatCreateVecs)")
        cols.append(v.getArray(readonly=True).copy())
    return (np.stack(cols, axis=1) if cols else None), names


def dependent_columns(comm, Z: np.ndarray) -> list[tuple[int, list[int]]]:
    r"""The columns of the distributed multivector ``Z`` (this rank's rows) that are zero or in
    the span of the columns before them, each as ``(k, [columns it depends on])`` (an empty list
    for a zero column); collective, the same answer on every rank. One reduction of the Gram
    matrix :math:`G = Z^TZ`, then for each column the squared distance to the span of the
    independent columns before it, :math:`G_{kk} - g_k^T G_{JJ}^{-1} g_k`, against
    :data:`DEPENDENCE_TOL` :math:`G_{kk}` (a scaled Gram matrix, so the columns' scales do not
    matter)."""
    G = np.ascontiguousarray(Z.T @ Z)
    mpi = comm.tompi4py() if isinstance(comm, PETSc.Comm) else comm
    G = mpi.allreduce(G)
    d = np.sqrt(np.clip(np.diag(G), 0.0, None))
    out, keep = [], []
    for k in range(G.shape[0]):
        if d[k] == 0.0:
            out.append((k, []))
            continue
        if keep:
            S = G[np.ix_(keep + [k], keep + [k])] / np.outer(d[keep + [k]], d[keep + [k]])
            g, H = S[:-1, -1], S[:-1, :-1]
            try:
                coef = np.linalg.solve(H, g)
            except np.linalg.LinAlgError:
                coef = np.linalg.lstsq(H, g, rcond=None)[0]
            if 1.0 - g @ coef <= DEPENDENCE_TOL:
                used = [j for j, c in zip(keep, coef) if abs(c) > 1e-8]
                out.append((k, used or list(keep)))
                continue
        keep.append(k)
    return out


def _check_independent(comm, Z: np.ndarray, names: list[str], kind: str, source: str,
                       prefix: str) -> None:
    """Refuse, on every rank, a near-null space with a zero or dependent column."""
    bad = dependent_columns(comm, Z)
    if not bad:
        return
    k, on = bad[0]
    what = f"{names[k]} is zero" if not on else \
        f"{names[k]} is a linear combination of {', '.join(names[j] for j in on)}"
    more = f" ({len(bad) - 1} more column{'s' if len(bad) > 2 else ''} too)" if len(bad) > 1 \
        else ""
    where = "; then MatNullSpaceCreate and MatSetNearNullSpace again" \
        if kind in ("auto", "matrix") else ""
    collective_check(comm, False,
                     f"-{prefix}near_null_space {kind}: the near-null space {source} has "
                     f"{Z.shape[1]} vectors but they are linearly dependent: {what}{more}. Give "
                     f"linearly independent vectors: drop the repeated and zero ones (and a "
                     f"constant vector when the null space already has has_constant=True)"
                     f"{where}")


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
    comm = A.getComm()
    if kind in ("auto", "matrix"):
        Z, names = _from_matrix(A)
        collective_check(comm, Z is not None or kind == "auto",
                         f"-{prefix}near_null_space matrix, but the matrix has none: set it "
                         f"with MatSetNearNullSpace (A.setNearNullSpace)")
        if Z is not None:
            _check_independent(comm, Z, names, kind, "set on the matrix (MatSetNearNullSpace)",
                               prefix)
            return Z
    if kind == "rigid_body":
        Z = _rigid_body(A, coordinates, block_size, prefix)
        _check_independent(comm, Z, [f"rigid-body mode {k}" for k in range(Z.shape[1])], kind,
                           "of the nodes' coordinates", prefix)
        return Z
    if block_size == 1:
        return None
    nlocal = A.getLocalSize()[0]
    return np.kron(np.ones((nlocal // block_size, 1)), np.eye(block_size))
