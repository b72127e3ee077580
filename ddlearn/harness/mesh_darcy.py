r"""Darcy flow on an unstructured mesh, the token mixers' set beyond the grid.

The domain is an L-shape with a hole,

.. math:: \Omega = (0,1)^2 \setminus \big([\tfrac12,1]^2 \cup B(c, r)\big),
          \qquad c = (\tfrac14, \tfrac14),\ r = 0.1,

triangulated by Delaunay on jittered points: the boundary sampled at spacing ``h``, the
interior a grid of spacing ``h`` with every point moved by a uniform offset of up to
``jitter * h`` per axis (seed ``mesh_seed``), points closer than ``h / 2`` to the boundary
dropped, and the triangles whose centroid falls outside :math:`\Omega` removed. So the tokens
form no tensor grid, the partition of the Schwarz mixer comes from ``rcb`` or ``metis`` on the
points, and FNO and Transolver's structured form do not apply.

Each sample solves :math:`-\nabla\cdot(a\nabla u) = 1` in :math:`\Omega`, :math:`u = 0` on
:math:`\partial\Omega` (outer and hole boundaries), with P1 elements (scikit-fem), the
coefficient the P1 interpolant of its nodal values. FNO's Darcy recipe carried to a mesh: the
Gaussian random field of :func:`ddlearn.harness.datasets.grf` evaluated at the nodes by its
cosine series truncated to ``modes`` per axis,

.. math:: g(x) = \sum_{k} c_k \xi_k \prod_a w_{k_a}\cos(\pi k_a x_a),\qquad
          c_k = \tau^{\alpha-1}(\pi^2|k|^2+\tau^2)^{-\alpha/2},\ c_0 = 0,

(:math:`w_0 = 1`, :math:`w_{k>0} = \sqrt2`; :math:`\xi` of ``default_rng(seed + k)`` for sample
``k``), thresholded to ``values`` (12 where :math:`g \ge 0`, 3 elsewhere). The linear systems are
solved by PETSc CG to ``rtol`` with ddlearn's two-level PC (the nodes' coordinates attached),
one sample per rank at a time, as :mod:`ddlearn.harness.datasets` does on grids; the dataset is
written in the format of :mod:`ddlearn.nn.data` (``[S, nodes]`` fields, ``[nodes, 2]``
coordinates) with its record.

::

    mpiexec -n 2 python -m ddlearn.harness.mesh_darcy [--h 0.03125] [--train 1100] [--test 200]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.spatial import Delaunay

from ddlearn.nn.data import save_dataset

from . import bench
from .datasets import cached, data_dir, solve_csr, solve_samples, solver_options, stats

try:
    from skfem import Basis, BilinearForm, ElementTriP1, LinearForm, MeshTri, asm
    from skfem.helpers import dot, grad
except ImportError as e:
    raise ImportError("ddlearn.harness.mesh_darcy assembles with scikit-fem: install the "
                      "'bench' extra (pip install 'ddlearn[bench]') or scikit-fem") from e

__all__ = ["CENTRE", "RADIUS", "options", "mesh", "inside", "grf_at", "coefficient",
           "solve_sample", "dataset_name", "generate", "ensure", "main"]

#: the hole
CENTRE, RADIUS = np.array([0.25, 0.25]), 0.1
COMM = MPI.COMM_WORLD
MODULE = "-m ddlearn.harness.mesh_darcy"
FAMILY = "darcy-mesh"


def options(h: float = 1 / 32, jitter: float = 0.3, mesh_seed: int = 0, train: int = 1100,
            test: int = 200, seed: int = 0, modes: int = 24, alpha: float = 2.0,
            tau: float = 3.0, values=(3.0, 12.0), rtol: float = 1e-10,
            subdomains: int = 16) -> dict:
    """The checked generator options (JSON types).

    Raises
    ------
    ValueError
        Naming the option and its valid range."""
    if not 0.005 <= h <= 0.1:
        raise ValueError(f"--h {h!r}: the mesh spacing must lie in [0.005, 0.1] (the hole's "
                         f"radius is {RADIUS}), e.g. --h 0.03125")
    if not 0 <= jitter < 0.5:
        raise ValueError(f"--jitter {jitter!r}: a fraction of h in [0, 0.5), e.g. 0.3")
    for name, v, low in (("train", train, 1), ("test", test, 0), ("seed", seed, 0),
                         ("mesh-seed", mesh_seed, 0), ("modes", modes, 2),
                         ("subdomains", subdomains, 1)):
        if int(v) != v or v < low:
            raise ValueError(f"--{name} {v!r}: an integer >= {low}")
    values = [float(v) for v in values]
    if len(values) != 2 or min(values) <= 0:
        raise ValueError(f"--values {values!r}: two positive coefficient values LOW,HIGH")
    if not 0 < rtol < 1:
        raise ValueError(f"--rtol {rtol!r}: a relative tolerance in (0, 1), e.g. 1e-10")
    return {"family": FAMILY, "dim": 2, "h": float(h), "jitter": float(jitter),
            "mesh_seed": int(mesh_seed), "train": int(train), "test": int(test),
            "seed": int(seed), "modes": int(modes), "alpha": float(alpha), "tau": float(tau),
            "values": values, "rtol": float(rtol), "subdomains": int(subdomains)}


# -- the mesh ---------------------------------------------------------------------------------

def inside(x: np.ndarray) -> np.ndarray:
    """Whether the points ``x`` (``[n, 2]``) lie in the open domain."""
    in_square = np.all((x > 0) & (x < 1), axis=1)
    in_notch = np.all(x >= 0.5, axis=1)
    in_hole = np.linalg.norm(x - CENTRE, axis=1) <= RADIUS
    return in_square & ~in_notch & ~in_hole


def _distance_to_boundary(x: np.ndarray) -> np.ndarray:
    """A lower bound of the distance of interior points to the boundary (exact for the square's
    sides, the notch's corner region and the circle)."""
    square = np.minimum(x, 1 - x).min(axis=1)
    notch = np.hypot(np.maximum(0.5 - x[:, 0], 0), np.maximum(0.5 - x[:, 1], 0))
    hole = np.linalg.norm(x - CENTRE, axis=1) - RADIUS
    return np.minimum(np.minimum(square, notch), hole)


def _boundary_points(h: float) -> np.ndarray:
    corners = np.array([[0, 0], [1, 0], [1, 0.5], [0.5, 0.5], [0.5, 1], [0, 1], [0, 0]], float)
    pts = []
    for a, b in zip(corners[:-1], corners[1:]):
        n = max(int(np.ceil(np.linalg.norm(b - a) / h)), 1)
        t = np.arange(n)[:, None] / n
        pts.append(a + t * (b - a))
    n = max(int(np.ceil(2 * np.pi * RADIUS / h)), 8)
    phi = 2 * np.pi * np.arange(n) / n
    pts.append(CENTRE + RADIUS * np.stack([np.cos(phi), np.sin(phi)], axis=1))
    return np.concatenate(pts)


def mesh(opts: dict) -> MeshTri:
    """The triangulation of the options' ``h``, ``jitter`` and ``mesh_seed`` (deterministic)."""
    h = opts["h"]
    rng = np.random.default_rng(opts["mesh_seed"])
    g = np.arange(h, 1, h)
    X = np.stack(np.meshgrid(g, g, indexing="xy"), axis=-1).reshape(-1, 2)
    X = X + rng.uniform(-opts["jitter"] * h, opts["jitter"] * h, X.shape)
    X = X[inside(X) & (_distance_to_boundary(X) > h / 2)]
    p = np.concatenate([_boundary_points(h), X])
    t = Delaunay(p).simplices
    centroid = p[t].mean(axis=1)
    t = t[inside(centroid)]
    used = np.unique(t)
    # renumber the nodes (every point lies in a kept triangle; the map guards the rule)
    renumber = np.full(len(p), -1)
    renumber[used] = np.arange(len(used))
    return MeshTri(p[used].T.copy(), renumber[t].T.copy())


# -- the coefficient --------------------------------------------------------------------------

def grf_at(x: np.ndarray, rng: np.random.Generator, alpha: float = 2.0, tau: float = 3.0,
           modes: int = 24) -> np.ndarray:
    r"""The cosine-series Gaussian random field (module docstring) at the points ``x``
    (``[n, 2]``), ``xi`` one ``standard_normal((modes, modes))`` from ``rng``."""
    k = np.arange(modes, dtype=np.float64)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    c = tau ** (alpha - 1) * (np.pi ** 2 * k2 + tau ** 2) ** (-alpha / 2)
    L = c * rng.standard_normal((modes, modes))
    L[0, 0] = 0.0
    w = np.where(k == 0, 1.0, np.sqrt(2.0))
    cx = w * np.cos(np.pi * np.outer(x[:, 0], k))  # [n, modes], axis x
    cy = w * np.cos(np.pi * np.outer(x[:, 1], k))
    return np.einsum("nj,ji,ni->n", cy, L, cx)


def coefficient(opts: dict, x: np.ndarray, k: int) -> np.ndarray:
    """Sample ``k``'s coefficient at the nodes ``x``: ``values[1]`` where the field is >= 0."""
    g = grf_at(x, np.random.default_rng(opts["seed"] + k), opts["alpha"], opts["tau"],
               opts["modes"])
    return np.where(g >= 0, opts["values"][1], opts["values"][0])


# -- the solve --------------------------------------------------------------------------------

@BilinearForm
def _diffusion(u, v, w):
    return w["a"] * dot(grad(u), grad(v))


@LinearForm
def _one(v, w):
    return 1.0 * v


def solve_sample(basis: Basis, a: np.ndarray, interior: np.ndarray
                 ) -> tuple[np.ndarray, int, float]:
    r"""Solve the P1 problem of nodal coefficient ``a`` (:func:`ddlearn.harness.datasets.solve_csr`
    on the interior nodes, their coordinates attached); return ``u`` at every node (zero on the
    boundary), the iteration count and the true relative residual of the interior system.

    Raises
    ------
    RuntimeError
        When CG does not converge."""
    K = asm(_diffusion, basis, a=basis.interpolate(a))
    f = asm(_one, basis)
    u_int, its, res = solve_csr(sp.csr_matrix(K[interior][:, interior]), f[interior],
                                basis.mesh.p.T[interior])
    u = np.zeros(basis.N)
    u[interior] = u_int
    return u, its, res


# -- the dataset ------------------------------------------------------------------------------

def dataset_name(opts: dict, nodes: int) -> str:
    """``darcy-mesh2d_<nodes>_<10 hex digits of the options' SHA-256>``."""
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:10]
    return f"{FAMILY}2d_{nodes}_{digest}"


def command_line(opts: dict) -> list[str]:
    """The arguments of ``python -m ddlearn.harness.mesh_darcy`` that regenerate ``opts``."""
    return ["--h", repr(opts["h"]), "--jitter", repr(opts["jitter"]),
            "--mesh-seed", str(opts["mesh_seed"]), "--train", str(opts["train"]),
            "--test", str(opts["test"]), "--seed", str(opts["seed"]),
            "--modes", str(opts["modes"]), "--alpha", repr(opts["alpha"]),
            "--tau", repr(opts["tau"]), "--values", ",".join(repr(v) for v in opts["values"]),
            "--rtol", repr(opts["rtol"]), "--subdomains", str(opts["subdomains"])]


def generate(opts: dict, out: str | None = None, comm=COMM, progress: bool = True) -> str:
    """Make the dataset of ``opts`` in ``out`` (default the dataset cache); return its path stem
    on every rank (collective). Sample ``k`` is solved by rank ``k mod P``; rank 0 writes. A
    failed solve on any rank raises ``RuntimeError`` on every rank and nothing is written."""
    out = data_dir() if out is None else out
    rank, size = comm.Get_rank(), comm.Get_size()
    m = mesh(opts)
    basis = Basis(m, ElementTriP1())
    interior = basis.complement_dofs(m.boundary_nodes())
    x = m.p.T
    solver = solver_options(opts, ddlearn_partition="rcb")

    def sample(k):
        a = coefficient(opts, x, k)
        u, its, res = solve_sample(basis, a, interior)
        return {"a": a, "u": u}, its, res

    done = solve_samples(opts["train"] + opts["test"], sample, opts["seed"], comm, FAMILY,
                         progress)
    path = os.path.join(out, dataset_name(opts, basis.N))
    stamp = bench.provenance(MODULE, command_line(opts), opts, comm)
    if rank == 0:
        its = done["its"]
        arrays = {"coefficient": done["fields"]["a"], "solution": done["fields"]["u"],
                  "coords": x.copy()}
        record = {
            "family": FAMILY, "dim": 2, "nodes": int(basis.N), "triangles": int(m.t.shape[1]),
            "boundary_nodes": int(basis.N - len(interior)),
            "train": opts["train"], "test": opts["test"], "seed": opts["seed"],
            "seeds": "sample k (k = 0 .. train+test-1, training samples first) uses seed + k",
            "pde": "-div(a grad u) = 1 on the L-shape (0,1)^2 minus [1/2,1]^2 with a hole of "
                   f"radius {RADIUS} at {CENTRE.tolist()}, u = 0 on the boundary; P1 elements "
                   "(scikit-fem), the coefficient the P1 interpolant of its nodal values",
            "mesh": "Delaunay of the boundary at spacing h and an interior grid of spacing h "
                    "jittered by up to jitter*h (mesh_seed); ddlearn.harness.mesh_darcy.mesh",
            "input": "FNO's thresholded Gaussian random field, by its cosine series at the nodes",
            "solver": {"method": "PETSc KSP CG, zero initial guess, fresh set-up per sample, on "
                                 "MPI.COMM_SELF", "rtol": opts["rtol"],
                       "norm": "unpreconditioned",
                       "pc": "ddlearn.pc.TwoLevelSchwarzPC (nodes' coordinates, rcb)",
                       "petsc_options": solver},
            "iterations": {**stats(its), "per_sample": its.tolist()},
            "true_relative_residual": stats(done["res"]),
            "seconds_per_sample": {**stats(done["sec"]), "ranks": size},
            "generator": opts, "command": stamp["command"], "commit": stamp["commit"],
            "date": stamp["date"], "provenance": stamp}
        save_dataset(path, arrays, record)
    comm.Barrier()
    return path


def ensure(opts: dict, out_dir: str | None = None, comm=COMM, progress: bool = True) -> str:
    """The path stem of the dataset of ``opts`` from the cache ``out_dir`` when its record
    matches and its hash verifies, otherwise made now (collective)."""
    out_dir = data_dir() if out_dir is None else out_dir
    nodes = mesh(opts).p.shape[1]
    path = os.path.join(out_dir, dataset_name(opts, nodes))
    ok = comm.bcast(cached(path, opts) if comm.Get_rank() == 0 else None, root=0)
    return path if ok else generate(opts, out_dir, comm, progress)


def main(argv: list[str] | None = None, comm=COMM) -> str:
    ap = argparse.ArgumentParser(prog="python -m ddlearn.harness.mesh_darcy",
                                 description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = options()
    ap.add_argument("--out", default=data_dir(), metavar="DIR", help="dataset folder")
    for name in ("h", "jitter", "alpha", "tau", "rtol"):
        ap.add_argument(f"--{name}", type=float, default=d[name])
    for name in ("mesh_seed", "train", "test", "seed", "modes", "subdomains"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=d[name])
    ap.add_argument("--values", default=",".join(map(repr, d["values"])), help="LOW,HIGH")
    args = ap.parse_args(argv)
    try:
        values = [float(v) for v in args.values.split(",")]
        opts = options(args.h, args.jitter, args.mesh_seed, args.train, args.test, args.seed,
                       args.modes, args.alpha, args.tau, values, args.rtol, args.subdomains)
    except ValueError as e:
        ap.error(str(e))  # the same options on every rank: every rank stops here
    path = generate(opts, args.out, comm)
    if comm.Get_rank() == 0:
        print(path)
    return path


if __name__ == "__main__":
    main()
