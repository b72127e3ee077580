r"""Operator-learning datasets made by the project's own solver (format: :mod:`ddlearn.nn.data`).

::

    mpiexec -n 2 python -m ddlearn.harness.datasets --family darcy --dim 2 [--out DIR]
        [--fine 169] [--resolutions 85,43,29] [--train 1000] [--test 200] [--seed 0]
        [--contrast 1e4] [--faces arithmetic|harmonic] [--rtol 1e-10] [--subdomains N]
        [--force] [-dataset_<petsc option> value ...]

Each sample ``k`` (``k = 0 .. train+test-1``, the training samples first) is drawn with the seed
``seed + k``, solved once on the *fine* grid of ``fine`` points per direction (boundary
included, ``fine - 2`` interior unknowns per direction), and written at every requested
resolution ``R`` by taking every ``r``-th point, ``r = (fine - 1)/(R - 1)``: one dataset per
resolution, the same samples in each.

Families
--------
``darcy`` (the Fourier neural operator's Darcy flow, Li et al. 2021, after their MATLAB
generator): :math:`-\nabla\cdot(a\nabla u) = 1` on the unit square, :math:`u = 0` on the
boundary, :math:`a = 12` where :math:`g \ge 0` and :math:`a = 3` where :math:`g < 0` (the
paper's values; their demo script uses 4), :math:`g` a Gaussian random field
:math:`\mathcal N(0, (-\Delta + \tau^2 I)^{-\alpha})` with :math:`\alpha = 2, \tau = 3`, drawn
by the cosine (Neumann) Karhunen–Loève expansion on the ``s = fine`` grid points,

.. math:: g = \mathrm{IDCT}\big(s\,c_k\,\xi_k\big),\qquad
          c_k = \tau^{\alpha-1}\,(\pi^2|k|^2 + \tau^2)^{-\alpha/2},\quad c_0 = 0,
          \quad \xi_k \sim \mathcal N(0, 1),

``k`` in :math:`\{0..s-1\}^{dim}`, the orthonormal type-II inverse DCT on every axis (MATLAB's
``idct``). Five-point finite differences with the *arithmetic* mean of the two point values on
each face, as their ``solve_gwf`` has it (``--faces harmonic`` for the harmonic mean). Unlike
``solve_gwf`` the field is not spline-interpolated from cell centres to the nodes: the grid
values are the thresholded field itself, so the stored coefficient takes the two values only.
``--dim 3`` is the same recipe on the unit cube (seven-point stencil, scale
:math:`s^{3/2}`).

``channels``, ``inclusions``: the project's high-contrast families
(:func:`ddlearn.decomposition.coefficients.coefficient` with the sample's seed, values in
``[1, contrast]``), ``contrast`` in ``[1, 1e4]`` (default 1e4), :math:`f = 1`, harmonic face
means as the project's problems use them. The stored input field is :math:`\kappa` itself (a
trainer takes :math:`\log_{10}`).

Grids and measured cost
-----------------------
FNO's data use 421 points per side subsampled by 5, 10, 15 to 85, 43, 29. The default fine
grid is 169 points (167² unknowns), subsampled by 2, 4, 6 to the same 85, 43, 29, because 421
does not fit the budget of 1200 samples (1000 train + 200 test) in 12 minutes on 2 ranks of a
2-core machine: measured per sample on one core, CG to 1e-10 with the two-level PC (hats,
``m²`` boxes), 421 points (419² = 175 561 unknowns): 1.2–1.6 s solve with 64–256 boxes and a
reused set-up, ≈ 2 s with a fresh one (1200 samples ≈ 17–20 min on 2 ranks); 169 points:
0.28 s with a fresh set-up (≈ 3 min on 2 ranks). ``--fine 421`` reproduces FNO's resolution.
High-contrast defaults: 2D 50 points per side (48² interior unknowns), 800 + 200 samples;
3D 18 points per side (16³ interior unknowns; ``--fine 34`` for 32³), 400 + 100.

Solver
------
Every rank solves its samples (``k = rank, rank + P, ...``) on ``MPI.COMM_SELF``: a fresh
KSP per sample, options prefix ``dataset_``: CG, ``rtol`` 1e-10 on the *unpreconditioned*
residual :math:`\|b - Au\|_2 \le 10^{-10}\|b\|_2`, the project's PC
``-dataset_pc_type python -dataset_pc_python_type ddlearn.pc.TwoLevelSchwarzPC`` with its
default coarse space (hats on ``m^dim`` boxes; ``--subdomains``), zero initial guess. A fresh
set-up per sample makes each sample's bits independent of which rank solves it and what it
solved before, so the content hash does not depend on the number of ranks. Rank 0 gathers the
samples and writes. The record keeps the solver options, every sample's iteration count and
the true relative residual :math:`\|b - Au\|/\|b\|` (recomputed with the scipy matrix).

Bad options (unknown family, a resolution no integer factor reaches, a contrast out of range)
raise ``ValueError`` naming the option and the fix on every rank before any work, and nothing is
written. :func:`ensure_dataset` returns a cached dataset whose record matches the options and
whose content hash verifies, and otherwise makes it.

The cache folder is ``--out``, default ``$DDLEARN_DATA`` or ``~/.cache/ddlearn/datasets``
(:func:`data_dir`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import numpy as np
import scipy.fft
from mpi4py import MPI

try:
    from petsc4py import PETSc
except ModuleNotFoundError:  # reading a cached set needs no PETSc (a machine without it)
    PETSc = None
from tqdm import tqdm

from ddlearn.decomposition.coefficients import coefficient
from ddlearn.decomposition.problems import FACES, Diffusion
from ddlearn.decomposition.timing import Timer
from ddlearn.nn.data import dataset_files, grid_coords, load_dataset, read_record, save_dataset

from . import bench

if PETSc is not None:
    from ddlearn.pc import set_coordinates

__all__ = ["FAMILIES", "DEFAULTS", "CONTRAST_RANGE", "PREFIX", "data_dir", "grf",
           "darcy_coefficient", "sample_coefficient", "options", "reachable", "dataset_name",
           "solve_csr", "solve_sample", "solve_samples", "solver_options", "fine_problem",
           "generate", "cached", "stats", "ensure_dataset", "command_line", "main"]

FAMILIES = ("darcy", "channels", "inclusions")
#: the contrasts the high-contrast sets accept
CONTRAST_RANGE = (1.0, 1e4)
#: options prefix of the per-sample KSP
PREFIX = "dataset_"
#: defaults per (family, dim): fine grid (points per side, boundary included), resolutions,
#: train and test counts
DEFAULTS = {
    ("darcy", 2): {"fine": 169, "resolutions": (85, 43, 29), "train": 1000, "test": 200},
    ("darcy", 3): {"fine": 33, "resolutions": (33, 17), "train": 400, "test": 100},
    **{(f, 2): {"fine": 50, "resolutions": (50,), "train": 800, "test": 200}
       for f in ("channels", "inclusions")},
    **{(f, 3): {"fine": 18, "resolutions": (18,), "train": 400, "test": 100}
       for f in ("channels", "inclusions")},
}
COMM = MPI.COMM_WORLD
MODULE = "-m ddlearn.harness.datasets"


def data_dir() -> str:
    """The dataset cache: ``$DDLEARN_DATA``, else ``~/.cache/ddlearn/datasets``."""
    return os.environ.get("DDLEARN_DATA") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "ddlearn", "datasets")


# -- the input fields --------------------------------------------------------------------------

def grf(s: int, rng: np.random.Generator, alpha: float = 2.0, tau: float = 3.0,
        dim: int = 2) -> np.ndarray:
    r"""A Gaussian random field on ``s^dim`` grid points by the cosine Karhunen–Loève expansion
    (FNO's ``GRF.m``): :math:`g = \mathrm{IDCT}(s^{dim/2} c_k \xi_k)`,
    :math:`c_k = \tau^{\alpha-1}(\pi^2|k|^2+\tau^2)^{-\alpha/2}`, :math:`c_0 = 0` (zero mean
    mode), orthonormal type-II inverse DCT on every axis; ``xi`` drawn as one
    ``standard_normal((s,)*dim)`` from ``rng``. Indexed ``[iy, ix]`` / ``[iz, iy, ix]``."""
    k = np.arange(s, dtype=np.float64)
    k2 = sum(np.meshgrid(*(k ** 2,) * dim, indexing="ij"))
    coef = tau ** (alpha - 1) * (np.pi ** 2 * k2 + tau ** 2) ** (-alpha / 2)
    L = s ** (dim / 2) * coef * rng.standard_normal((s,) * dim)
    L[(0,) * dim] = 0.0
    return scipy.fft.idctn(L, type=2, norm="ortho")


def darcy_coefficient(s: int, seed: int, alpha: float = 2.0, tau: float = 3.0,
                      values: tuple = (3.0, 12.0), dim: int = 2) -> np.ndarray:
    r"""FNO's piecewise-constant Darcy coefficient on ``s^dim`` points: ``values[1]`` (12) where
    the :func:`grf` field of ``default_rng(seed)`` is :math:`\ge 0`, ``values[0]`` (3) else."""
    g = grf(s, np.random.default_rng(seed), alpha, tau, dim)
    return np.where(g >= 0, float(values[1]), float(values[0]))


def sample_coefficient(opts: dict, k: int) -> np.ndarray:
    """Sample ``k``'s input field on the fine grid (seed ``opts["seed"] + k``)."""
    seed = int(opts["seed"]) + int(k)
    if opts["family"] == "darcy":
        return darcy_coefficient(opts["fine"], seed, opts["alpha"], opts["tau"],
                                 tuple(opts["values"]), opts["dim"])
    return coefficient(opts["family"], opts["fine"] - 2, opts["contrast"], seed, opts["dim"])


# -- options --------------------------------------------------------------------------------

def reachable(fine: int) -> list[int]:
    """The resolutions an integer subsampling of ``fine`` points reaches:
    ``R = (fine - 1)/r + 1`` for every divisor ``r`` of ``fine - 1``."""
    return [(fine - 1) // r + 1 for r in range(1, fine) if (fine - 1) % r == 0
            and (fine - 1) // r + 1 >= 3]


def _default_subdomains(fine: int, dim: int) -> int:
    """``m^dim`` boxes, ``m = max(2, round((fine-1)/40))`` in 2D, ``round((fine-1)/8)`` in 3D
    (about 40² or 8³ unknowns a box)."""
    m = max(2, round((fine - 1) / (40 if dim == 2 else 8)))
    return int(m ** dim)


def _plain(d):
    return json.loads(json.dumps(d))


def options(family: str, dim: int = 2, fine: int | None = None, resolutions=None,
            train: int | None = None, test: int | None = None, seed: int = 0,
            contrast: float | None = None, faces: str | None = None, rtol: float = 1e-10,
            subdomains: int | None = None, alpha: float = 2.0, tau: float = 3.0,
            values=(3.0, 12.0)) -> dict:
    """The checked, complete generator options (JSON types), defaults filled in
    (:data:`DEFAULTS`). The same on every rank; no communication.

    Raises
    ------
    ValueError
        Naming the option and the fix: an unknown family or dimension, a resolution that no
        integer factor reaches from ``fine``, a contrast outside :data:`CONTRAST_RANGE` (or given
        for ``darcy``), non-positive counts, an unknown ``faces``, ``rtol`` outside (0, 1).
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown --family {family!r}; choose one of {', '.join(FAMILIES)}")
    if dim not in (2, 3):
        raise ValueError(f"--dim {dim!r}: the datasets are 2D or 3D; use --dim 2 or --dim 3")
    d = DEFAULTS[family, dim]
    fine = d["fine"] if fine is None else fine
    if int(fine) != fine or fine < 3:
        raise ValueError(f"--fine {fine!r}: the fine grid needs an integer >= 3 points per side "
                         f"(boundary included), e.g. --fine {d['fine']}")
    fine = int(fine)
    if resolutions is None:
        resolutions = d["resolutions"] if fine == d["fine"] else (fine,)
    if isinstance(resolutions, (int, np.integer)):
        resolutions = (resolutions,)
    if isinstance(resolutions, str):
        resolutions = [r for r in resolutions.split(",") if r.strip()]
    try:
        resolutions = [int(r) for r in resolutions]
    except (TypeError, ValueError):
        raise ValueError(f"--resolutions {resolutions!r}: give integers, e.g. "
                         f"--resolutions {','.join(map(str, d['resolutions']))}") from None
    ok = reachable(fine)
    bad = [r for r in resolutions if r not in ok]
    if bad or not resolutions:
        raise ValueError(f"--resolutions {','.join(map(str, resolutions)) or '(none)'}: "
                         f"{bad or 'nothing'} is not reachable from --fine {fine} by an integer "
                         f"subsampling factor ((fine - 1)/(R - 1) must be an integer); reachable "
                         f"from {fine}: {', '.join(map(str, ok))}; or choose --fine with "
                         f"fine - 1 a multiple of every R - 1")
    resolutions = sorted(set(resolutions), reverse=True)
    train = d["train"] if train is None else train
    test = d["test"] if test is None else test
    if int(train) != train or train < 1 or int(test) != test or test < 0:
        raise ValueError(f"--train {train!r} --test {test!r}: counts are integers, train >= 1 "
                         f"and test >= 0")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"--seed {seed!r}: a non-negative integer (sample k uses seed + k)")
    faces = faces or ("arithmetic" if family == "darcy" else "harmonic")
    if faces not in FACES:
        raise ValueError(f"unknown --faces {faces!r}; choose one of {', '.join(FACES)}")
    if not 0 < rtol < 1:
        raise ValueError(f"--rtol {rtol!r}: a relative tolerance in (0, 1), e.g. 1e-10")
    subdomains = _default_subdomains(fine, dim) if subdomains is None else subdomains
    if int(subdomains) != subdomains or subdomains < 1:
        raise ValueError(f"--subdomains {subdomains!r}: a positive integer")
    out = {"family": family, "dim": int(dim), "fine": fine, "resolutions": resolutions,
           "train": int(train), "test": int(test), "seed": int(seed), "faces": faces,
           "rtol": float(rtol), "subdomains": int(subdomains)}
    lo, hi = CONTRAST_RANGE
    if family == "darcy":
        if contrast is not None:
            raise ValueError(f"--contrast is for the high-contrast families (channels, "
                             f"inclusions); Darcy's two values are {list(values)} (--values)")
        values = [float(v) for v in values]
        if len(values) != 2 or min(values) <= 0:
            raise ValueError(f"--values {values!r}: two positive coefficient values LOW,HIGH")
        out.update(alpha=float(alpha), tau=float(tau), values=values)
    else:
        contrast = 1e4 if contrast is None else float(contrast)
        if not lo <= contrast <= hi:
            raise ValueError(f"--contrast {contrast:g} is outside [{lo:g}, {hi:g}]: give a "
                             f"contrast from 1 to 1e4 (the high-contrast sets' range)")
        out["contrast"] = contrast
    return _plain(out)


def _generator_key(opts: dict) -> dict:
    """What makes a dataset's samples: the options without the list of resolutions."""
    return {k: v for k, v in opts.items() if k != "resolutions"}


def dataset_name(opts: dict, resolution: int) -> str:
    """The file stem of one resolution: ``<family><dim>d_<R>_<10 hex digits of the options'
    SHA-256>``, e.g. ``darcy2d_85_1a2b3c4d5e``."""
    key = json.dumps(_generator_key(opts), sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"{opts['family']}{opts['dim']}d_{resolution}_{digest}"


def command_line(opts: dict) -> list[str]:
    """The arguments of ``python -m ddlearn.harness.datasets`` that regenerate ``opts``."""
    argv = ["--family", opts["family"], "--dim", str(opts["dim"]), "--fine", str(opts["fine"]),
            "--resolutions", ",".join(map(str, opts["resolutions"])),
            "--train", str(opts["train"]), "--test", str(opts["test"]),
            "--seed", str(opts["seed"]), "--faces", opts["faces"], "--rtol", repr(opts["rtol"]),
            "--subdomains", str(opts["subdomains"])]
    if opts["family"] == "darcy":
        argv += ["--alpha", repr(opts["alpha"]), "--tau", repr(opts["tau"]),
                 "--values", ",".join(repr(v) for v in opts["values"])]
    else:
        argv += ["--contrast", repr(opts["contrast"])]
    return argv


# -- the solve ----------------------------------------------------------------------------------

def _need_petsc() -> None:
    if PETSc is None:
        raise RuntimeError("making a dataset solves with PETSc, and petsc4py is not installed "
                           "here: run scripts/setup.sh, or copy the cached set into the data "
                           "folder (--out / $DDLEARN_DATA)")


def solver_options(opts: dict, **owned) -> dict:
    """Put the KSP's settings under :data:`PREFIX` into the options database (ours, and the
    ``owned`` keys, override a user's for the keys we own) and return every ``-dataset_*``
    option, for the record."""
    _need_petsc()
    db = PETSc.Options()
    owned = {"ksp_type": "cg", "ksp_rtol": repr(opts["rtol"]), "ksp_max_it": "10000",
             "ksp_norm_type": "unpreconditioned", "pc_type": "python",
             "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
             "ddlearn_subdomains": str(opts["subdomains"]), **owned}
    for key, value in owned.items():
        db.setValue(PREFIX + key, value)
    return {k: v for k, v in sorted(db.getAll().items()) if k.startswith(PREFIX)}


def solve_csr(M, b: np.ndarray, coords: np.ndarray, guess: np.ndarray | None = None
              ) -> tuple[np.ndarray, int, float]:
    r"""Solve :math:`Mu = b` (scipy CSR, SPD) on ``COMM_SELF`` with a fresh KSP (options prefix
    :data:`PREFIX`, the unknowns' ``coords`` attached; zero initial guess, or ``guess``); return
    ``u``, the iteration count and the true relative residual :math:`\|b - Mu\|/\|b\|`.

    Raises
    ------
    RuntimeError
        When CG does not converge."""
    _need_petsc()
    A = PETSc.Mat().createAIJ(M.shape, csr=(M.indptr, M.indices, M.data), comm=PETSc.COMM_SELF)
    A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    A.assemble()
    set_coordinates(A, coords)
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOptionsPrefix(PREFIX)
    ksp.setOperators(A)
    ksp.setFromOptions()
    rhs, x = A.createVecs()
    rhs.setArray(np.asarray(b, dtype=np.float64))
    if guess is not None:
        x.setArray(np.asarray(guess, dtype=np.float64))
        ksp.setInitialGuessNonzero(True)
    try:
        ksp.solve(rhs, x)
        its, reason = ksp.getIterationNumber(), ksp.getConvergedReason()
        u = x.getArray().copy()
    finally:
        ksp.destroy(), A.destroy(), rhs.destroy(), x.destroy()
    if reason <= 0:
        raise RuntimeError(f"CG did not converge (reason {reason}, {its} iterations)")
    res = float(np.linalg.norm(b - M @ u) / np.linalg.norm(b))
    return u, int(its), res


def solve_sample(problem: Diffusion, guess: np.ndarray | None = None
                 ) -> tuple[np.ndarray, int, float]:
    r"""Solve :math:`Au = 1` for ``problem`` (:func:`solve_csr`; ``guess``: interior values in
    natural order); return the interior solution in natural order, the iteration count and the
    true relative residual."""
    return solve_csr(problem.matrix(), np.ones(problem.n), problem.coordinates(), guess)


def fine_problem(opts: dict, a: np.ndarray) -> Diffusion:
    """The fine-grid problem of a sample whose input field on the fine grid is ``a``."""
    return Diffusion(opts["fine"] - 2, a, opts["dim"], faces=opts["faces"])


def _full(u: np.ndarray, fine: int, dim: int) -> np.ndarray:
    """Interior values (natural order) on the whole grid, zero on the boundary."""
    out = np.zeros((fine,) * dim)
    out[(slice(1, -1),) * dim] = u.reshape((fine - 2,) * dim)
    return out


def stats(values) -> dict:
    """``min``, ``mean`` and ``max`` of ``values`` (floats), for a record."""
    v = np.asarray(values, dtype=float)
    return {"min": float(v.min()), "mean": float(v.mean()), "max": float(v.max())}


def solve_samples(total: int, sample, seed: int, comm=COMM, desc: str = "samples",
                  progress: bool = True) -> dict | None:
    """Run ``sample(k) -> (fields, iterations, residual)`` for ``k = 0 .. total-1``, sample
    ``k`` on rank ``k mod P`` (collective). Rank 0 gets ``fields`` (each named array stacked
    over the samples, in sample order) and the samples' ``its``, ``res`` and ``sec``; the other
    ranks get None. A ``RuntimeError`` of any sample raises on every rank, naming the sample
    and its seed (``seed + k``)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = range(rank, total, size)
    rows, error = [], None
    bar = tqdm(total=len(mine), desc=f"{desc} rank 0 of {size}", unit="sample",
               disable=not progress or rank != 0, file=sys.stderr)
    for k in mine:
        timer = Timer()
        try:
            fields, its, res = sample(k)
        except RuntimeError as e:
            error = f"sample {k} (seed {seed + k}): {e}"
            break
        rows.append((k, fields, its, res, timer.lap("sample")))
        bar.update()
    bar.close()
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise RuntimeError(f"dataset generation failed, nothing written: {errors[0]}")
    parts = comm.gather(rows, root=0)
    if rank != 0:
        return None
    rows = sorted((r for part in parts for r in part), key=lambda r: r[0])
    return {"fields": {name: np.stack([r[1][name] for r in rows]) for name in rows[0][1]},
            "its": np.array([r[2] for r in rows], dtype=int),
            "res": np.array([r[3] for r in rows], dtype=float),
            "sec": np.array([r[4] for r in rows], dtype=float)}


def generate(opts: dict, out: str | None = None, comm=COMM, progress: bool = True,
             argv: list[str] | None = None) -> list[str]:
    """Make the datasets of ``opts`` (from :func:`options`), one per resolution, in ``out``
    (default :func:`data_dir`); return their path stems on every rank (collective).

    Sample ``k`` is solved by rank ``k mod P``; rank 0 gathers and writes. A failed solve on
    any rank raises ``RuntimeError`` on every rank and nothing is written."""
    out = data_dir() if out is None else out
    rank, size = comm.Get_rank(), comm.Get_size()
    total = opts["train"] + opts["test"]
    fine, dim = opts["fine"], opts["dim"]
    factors = {R: (fine - 1) // (R - 1) for R in opts["resolutions"]}
    solver = solver_options(opts)

    def sample(k):
        a = sample_coefficient(opts, k)
        u, its, res = solve_sample(fine_problem(opts, a))
        u = _full(u, fine, dim)
        fields = {}
        for R, r in factors.items():
            sub = (slice(None, None, r),) * dim
            fields[f"a{R}"], fields[f"u{R}"] = a[sub], u[sub]
        return fields, its, res

    done = solve_samples(total, sample, opts["seed"], comm, f"{opts['family']}{dim}d",
                         progress)
    paths = [os.path.join(out, dataset_name(opts, R)) for R in factors]
    stamp = bench.provenance(MODULE, command_line(opts), opts, comm)
    if rank == 0:
        its, res, sec = done["its"], done["res"], done["sec"]
        for (R, r), path in zip(factors.items(), paths):
            arrays = {
                "coefficient": done["fields"][f"a{R}"], "solution": done["fields"][f"u{R}"],
                "coords": grid_coords((R,) * dim)}
            record = {
                "family": opts["family"], "dim": dim, "resolution": R, "fine": fine,
                "fine_grid": [fine] * dim, "subsample": r,
                "train": opts["train"], "test": opts["test"], "seed": opts["seed"],
                "seeds": "sample k (k = 0 .. train+test-1, training samples first) uses seed "
                         "+ k",
                "pde": "-div(a grad u) = 1 in the unit " + ("square" if dim == 2 else "cube")
                       + ", u = 0 on the boundary; finite differences on the fine grid "
                       f"({2 * dim + 1}-point), {opts['faces']} face means; grids include "
                       "the boundary",
                "input": ("thresholded Gaussian random field (FNO)" if opts["family"] == "darcy"
                          else f"ddlearn.decomposition.coefficients {opts['family']}"),
                "solver": {"method": "PETSc KSP CG, zero initial guess, fresh set-up per "
                                     "sample, on MPI.COMM_SELF",
                           "rtol": opts["rtol"], "norm": "unpreconditioned",
                           "pc": "ddlearn.pc.TwoLevelSchwarzPC (default coarse space)",
                           "petsc_options": solver},
                "iterations": {**stats(its), "per_sample": its.tolist()},
                "true_relative_residual": stats(res),
                "seconds_per_sample": {**stats(sec), "ranks": size},
                "generator": _generator_key(opts),
                "command": stamp["command"], "commit": stamp["commit"],
                "date": stamp["date"], "provenance": stamp}
            save_dataset(path, arrays, record)
    comm.Barrier()
    return paths


def cached(path: str, generator: dict) -> bool:
    """The dataset at ``path`` exists, its record's ``generator`` is ``generator`` and its
    content hash verifies."""
    npz, rec = dataset_files(path)
    if not (os.path.exists(npz) and os.path.exists(rec)):
        return False
    try:
        record = read_record(path)
        if record.get("generator") != generator:
            return False
        load_dataset(path, verify=True)
    except ValueError:
        return False
    return True


def ensure_dataset(family: str, dim: int, resolution: int, out_dir: str | None = None,
                   comm=COMM, progress: bool = True, **opts) -> str:
    """The path stem of the dataset ``family``, ``dim`` at ``resolution`` points per side made
    with the options ``opts`` (keywords of :func:`options`), from the cache ``out_dir``
    (default :func:`data_dir`) when its record matches and its hash verifies, otherwise made
    now (with every resolution of ``opts`` plus ``resolution``, one solve per sample).
    Collective over ``comm``; every rank gets the path.

    Raises
    ------
    ValueError
        Bad options (:func:`options`), on every rank, before any work."""
    out_dir = data_dir() if out_dir is None else out_dir
    requested = opts.pop("resolutions", None)
    base = options(family, dim, **opts)
    if requested is None:
        requested = base["resolutions"]
    if isinstance(requested, (int, np.integer)):
        requested = [requested]
    if isinstance(requested, str):
        requested = requested.split(",")
    full = options(family, dim, resolutions=[int(resolution), *requested], **opts)
    path = os.path.join(out_dir, dataset_name(full, int(resolution)))
    ok = comm.bcast(cached(path, _generator_key(full)) if comm.Get_rank() == 0 else None, root=0)
    if not ok:
        generate(full, out_dir, comm, progress)
    return path


# -- the command line -------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m ddlearn.harness.datasets",
        description="Operator-learning datasets (Darcy after FNO, high-contrast channels and "
                    "inclusions) solved with CG and ddlearn's two-level PC; one dataset per "
                    "resolution. Options -dataset_<petsc option> reach the KSP.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--family", required=True, help=f"one of {', '.join(FAMILIES)}")
    ap.add_argument("--dim", type=int, default=2, help="2 or 3")
    ap.add_argument("--out", default=data_dir(), metavar="DIR",
                    help="cache folder ($DDLEARN_DATA or ~/.cache/ddlearn/datasets)")
    ap.add_argument("--fine", type=int, default=None,
                    help="fine grid points per side, boundary included (darcy 2D: 169; 421 is "
                         "FNO's; channels/inclusions: 50 in 2D, 18 in 3D)")
    ap.add_argument("--resolutions", default=None,
                    help="comma-separated points per side, reached from --fine by integer "
                         "subsampling (darcy 2D: 85,43,29; others: the fine grid)")
    ap.add_argument("--train", type=int, default=None, help="training samples")
    ap.add_argument("--test", type=int, default=None, help="test samples")
    ap.add_argument("--seed", type=int, default=0, help="sample k uses seed + k")
    ap.add_argument("--contrast", type=float, default=None,
                    help="channels/inclusions: contrast in [1, 1e4] (default 1e4)")
    ap.add_argument("--faces", default=None, choices=FACES,
                    help="face coefficient (default: arithmetic for darcy, harmonic else)")
    ap.add_argument("--rtol", type=float, default=1e-10,
                    help="CG relative tolerance on the unpreconditioned residual")
    ap.add_argument("--subdomains", type=int, default=None,
                    help="boxes of the two-level PC (default m^dim, about 40^2 / 8^3 points "
                         "each)")
    ap.add_argument("--alpha", type=float, default=2.0, help="darcy: GRF smoothness")
    ap.add_argument("--tau", type=float, default=3.0, help="darcy: GRF inverse length scale")
    ap.add_argument("--values", default="3,12", help="darcy: LOW,HIGH coefficient values")
    ap.add_argument("--force", action="store_true",
                    help="regenerate even when a matching, verified dataset is cached")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.set_defaults(study="datasets", script=MODULE)
    return ap


def main(argv: list[str] | None = None, comm=COMM) -> list[str]:
    """The command line; returns the datasets' path stems."""
    ap = _parser()
    args = bench.parse(ap, argv)
    try:
        values = [float(v) for v in args.values.split(",")]
    except ValueError:
        ap.error(f"--values {args.values!r}: two numbers LOW,HIGH, e.g. 3,12")
    out = args.out
    try:
        opts = options(args.family, args.dim, args.fine, args.resolutions, args.train,
                       args.test, args.seed, args.contrast, args.faces, args.rtol,
                       args.subdomains, args.alpha, args.tau, values)
    except ValueError as e:
        ap.error(str(e))
    paths = [os.path.join(out, dataset_name(opts, R)) for R in opts["resolutions"]]
    done = comm.bcast(all(cached(p, _generator_key(opts)) for p in paths)
                      if comm.Get_rank() == 0 else None, root=0)
    if done and not args.force:
        bench.show(f"cached and verified: {', '.join(paths)}", comm)
        return paths
    paths = generate(opts, out, comm, progress=not args.quiet)
    if comm.Get_rank() == 0:
        for p in paths:
            rec = read_record(p)
            print(f"{p}: {rec['samples']} samples, grid {rec['grid']}, CG iterations "
                  f"{rec['iterations']['mean']:.1f} mean / {rec['iterations']['max']:.0f} max, "
                  f"sha256 {rec['sha256']}", flush=True)
    return paths


if __name__ == "__main__":
    main()
