r"""The on-disk format of an operator-learning dataset (torch-free, PETSc-free).

A dataset is ``S`` samples of an input field and the solution of a PDE on one grid of
``*grid`` points (boundary included), stored as three float64 arrays

``coefficient`` ``[S, *grid]``
    the input field: Darcy's :math:`a(x)`, or a high-contrast family's :math:`\kappa(x)`
    (the trainer takes :math:`\log_{10}` itself);
``solution`` ``[S, *grid]``
    :math:`u` on the same points (zero on the boundary);
``coords`` ``[T, dim]``, ``T = prod(grid)``
    the token coordinates in :math:`[0,1]^{dim}`, in the order of a sample flattened in C
    order: a grid is indexed ``[iy, ix]`` (2D) or ``[iz, iy, ix]`` (3D), so x varies fastest
    and token ``t = iy * nx + ix`` sits at ``(ix / (nx-1), iy / (ny-1))``;

or, on an unstructured mesh, ``coefficient`` and ``solution`` ``[S, T]`` at its ``T`` nodes and
``coords`` ``[T, 2]`` or ``[T, 3]`` the nodes' coordinates (``grid`` is then ``(T,)``);

and a JSON record beside them (family, dim, grid, fine grid, subsampling factor, train/test
counts, the seed rule, the solver options and the iteration/residual statistics, the
provenance stamp: command, commit, date, ...) that ends with ``sha256``, the *content hash*
of the arrays (:func:`content_hash`).

Files: ``<path>.npz`` (one uncompressed ``np.savez`` archive of the three arrays) and
``<path>.json`` (the record). One archive rather than a folder of ``.npy`` files because one
file is replaced by one atomic rename: a reader sees the old arrays or the new ones, never a
mix, while a folder would need its files renamed one by one. Uncompressed because the fields
are float64 noise-like data that compress poorly and a plain archive loads at disk speed.

The SHA-256 of the ``.npz`` *file* would change on every regeneration (zip members carry
timestamps), so the record holds a hash of the content instead: for each array in sorted name
order the bytes of its name, its dtype string, its shape and its C-order data, each followed
by a separator. Regenerating a dataset with the same options gives the same ``sha256`` bit for
bit, whatever the date and the number of ranks.

Writes are atomic (:mod:`ddlearn.decomposition.atomic`): :func:`save_dataset` removes an old
record first, writes the arrays, and writes the record last, so a dataset without its record
is an unfinished one, and :func:`load_dataset` refuses it.
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from ddlearn.decomposition.atomic import atomic_write
from ddlearn.decomposition.structured import grid_coordinates

__all__ = ["ARRAYS", "FORMAT", "VERSION", "Dataset", "Split", "content_hash", "dataset_files",
           "grid_coords", "save_dataset", "load_dataset", "read_record"]

#: the arrays of a dataset, in the order the content hash takes them (sorted names)
ARRAYS = ("coefficient", "coords", "solution")
#: the record's ``format`` entry and its version
FORMAT = "ddlearn-operator-dataset"
VERSION = 1


def dataset_files(path: str) -> tuple[str, str]:
    """The two files of the dataset ``path``: ``(<path>.npz, <path>.json)``; ``path`` may be
    given with either suffix or none."""
    path = os.fspath(path)
    for suffix in (".npz", ".json"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return path + ".npz", path + ".json"


def grid_coords(grid) -> np.ndarray:
    r"""Token coordinates of a grid of ``grid = (..., ny, nx)`` points (boundary included) of
    the unit square or cube, shape ``[prod(grid), dim]``, x fastest: row ``t`` of the C-order
    flattening of ``[iy, ix]`` is :math:`(i_x/(n_x-1), i_y/(n_y-1))` (3D likewise with
    :math:`i_z` slowest)."""
    grid = tuple(int(g) for g in grid)
    if not grid or min(grid) < 2:
        raise ValueError(f"a grid needs at least 2 points per direction, got {grid}")
    return grid_coordinates(grid[::-1])  # the array's last axis is x


def content_hash(arrays: dict) -> str:
    """SHA-256 (hex) of the arrays' content: for each name in sorted order, the name, the dtype
    string (``<f8``), the shape and the C-order bytes, each followed by a NUL byte. Independent
    of the file's zip timestamps, so a regenerated dataset hashes the same."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        for part in (name.encode(), a.dtype.str.encode(), repr(tuple(a.shape)).encode()):
            h.update(part + b"\0")
        h.update(memoryview(a).cast("B"))
        h.update(b"\0")
    return h.hexdigest()


def _check_arrays(arrays: dict, where: str) -> tuple[int, tuple]:
    """Names, dtypes and shapes of a dataset's arrays; returns ``(S, grid)``."""
    names = sorted(arrays)
    if names != sorted(ARRAYS):
        raise ValueError(f"{where}: a dataset has the arrays {', '.join(ARRAYS)}, got "
                         f"{', '.join(names) or 'none'}")
    for name in ARRAYS:
        if arrays[name].dtype != np.float64:
            raise ValueError(f"{where}: array {name!r} is {arrays[name].dtype}, not float64")
    coef, sol, coords = arrays["coefficient"], arrays["solution"], arrays["coords"]
    if coef.ndim < 2 or coef.ndim > 4 or coef.shape != sol.shape:
        raise ValueError(f"{where}: inconsistent shapes: coefficient {coef.shape} and solution "
                         f"{sol.shape} must both be [samples, *grid] with a 2D or 3D grid, or "
                         f"[samples, nodes] on a mesh")
    grid = coef.shape[1:]
    # a mesh's nodes carry their own coordinates, of the mesh's dimension
    dims = (2, 3) if len(grid) == 1 else (len(grid),)
    if coords.ndim != 2 or coords.shape[0] != int(np.prod(grid)) or coords.shape[1] not in dims:
        raise ValueError(f"{where}: inconsistent shapes: coords {coords.shape} does not match "
                         f"the grid {grid} (expected ({int(np.prod(grid))}, "
                         f"{' or '.join(map(str, dims))}))")
    return coef.shape[0], grid


def _check_counts(record: dict, samples: int, grid: tuple, where: str) -> tuple[int, int]:
    try:
        train, test = int(record["train"]), int(record["test"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: the record needs integer 'train' and 'test' counts") from None
    if train < 0 or test < 0 or train + test != samples:
        raise ValueError(f"{where}: inconsistent shapes: the record's train + test = "
                         f"{train} + {test} but the arrays hold {samples} samples")
    if "grid" in record and tuple(record["grid"]) != tuple(grid):
        raise ValueError(f"{where}: inconsistent shapes: the record's grid {record['grid']} "
                         f"differs from the arrays' {list(grid)}")
    return train, test


@dataclass(frozen=True)
class Split:
    """Samples ``[start, stop)`` of a dataset: views, no copies."""

    coefficient: np.ndarray
    solution: np.ndarray

    def __len__(self) -> int:
        return self.coefficient.shape[0]


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset (:func:`load_dataset`): the arrays, the record and the path stem.

    ``train`` are the first ``record["train"]`` samples, ``test`` the ``record["test"]`` after
    them."""

    coefficient: np.ndarray
    solution: np.ndarray
    coords: np.ndarray
    record: dict
    path: str

    @property
    def grid(self) -> tuple:
        return self.coefficient.shape[1:]

    @property
    def dim(self) -> int:
        return self.coords.shape[1]

    @property
    def mesh(self) -> bool:
        """Whether the samples live on a mesh's nodes (``[S, nodes]``), not on a tensor grid."""
        return len(self.grid) == 1

    def _split(self, start, stop) -> Split:
        return Split(self.coefficient[start:stop], self.solution[start:stop])

    @property
    def train(self) -> Split:
        return self._split(0, int(self.record["train"]))

    @property
    def test(self) -> Split:
        n = int(self.record["train"])
        return self._split(n, n + int(self.record["test"]))

    def __len__(self) -> int:
        return self.coefficient.shape[0]


def save_dataset(path: str, arrays: dict, record: dict) -> str:
    """Write the dataset ``path`` (``<path>.npz`` and ``<path>.json``) and return the record's
    path.

    ``arrays`` holds ``coefficient``, ``solution`` (``[S, *grid]``) and ``coords``
    (``[prod(grid), dim]``), all float64; ``record`` is JSON-ready and has ``train`` and
    ``test`` (summing to ``S``). The written record adds ``format``, ``version``, ``grid``,
    ``samples`` and ``sha256`` (:func:`content_hash`).

    Everything is checked before anything is written; an old record is removed first, the
    arrays are written atomically and the record last, so an interrupted write leaves no
    record (and :func:`load_dataset` refuses the dataset) rather than a mismatched pair.

    Raises
    ------
    ValueError
        Missing or extra arrays, a dtype other than float64, inconsistent shapes or counts.
    """
    npz, rec = dataset_files(path)
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    samples, grid = _check_arrays(arrays, f"dataset {npz}")
    _check_counts(record, samples, grid, f"dataset {npz}")
    out = {"format": FORMAT, "version": VERSION,
           **{k: v for k, v in record.items() if k != "sha256"},
           "grid": list(grid), "samples": int(samples), "sha256": content_hash(arrays)}
    text = json.dumps(out, indent=1)            # refuse a record that is not JSON-ready now
    if os.path.exists(rec):
        os.unlink(rec)
    atomic_write(npz, lambda f: np.savez(f, **arrays))
    atomic_write(rec, lambda f: f.write(text.encode()))
    return rec


def read_record(path: str) -> dict:
    """The JSON record of the dataset ``path``.

    Raises
    ------
    ValueError
        When the record is missing or is not JSON."""
    npz, rec = dataset_files(path)
    if not os.path.exists(rec):
        raise ValueError(f"dataset {npz}: its record {rec} is missing (an unfinished or "
                         f"foreign dataset); regenerate it")
    try:
        with open(rec) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"dataset {npz}: its record {rec} is not JSON ({e}); regenerate "
                         f"it") from None


def load_dataset(path: str, verify: bool = True) -> Dataset:
    """Load the dataset ``path`` (``<path>.npz`` + ``<path>.json``).

    With ``verify`` the arrays' :func:`content_hash` is compared with the record's ``sha256``.

    Raises
    ------
    ValueError
        When a file is missing, the arrays have inconsistent shapes or counts, or (``verify``)
        the content hash differs from the record: "... was modified or corrupted; regenerate it
        with: <the record's command>".
    """
    npz, rec = dataset_files(path)
    record = read_record(path)
    command = record.get("command") or record.get("provenance", {}).get("command") or \
        "the command that made it"
    if not os.path.exists(npz):
        raise ValueError(f"dataset {npz} is missing (its record {rec} exists); regenerate it "
                         f"with: {command}")
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        # a truncated, overwritten or foreign archive
        raise ValueError(f"dataset {npz} was modified or corrupted ({e}); regenerate it "
                         f"with: {command}") from None
    samples, grid = _check_arrays(arrays, f"dataset {npz}")
    _check_counts(record, samples, grid, f"dataset {npz}")
    if verify:
        got, want = content_hash(arrays), record.get("sha256")
        if got != want:
            raise ValueError(f"dataset {npz} was modified or corrupted (content SHA-256 {got} "
                             f"differs from the record's {want}); regenerate it with: "
                             f"{command}")
    return Dataset(arrays["coefficient"], arrays["solution"], arrays["coords"], record,
                   npz[: -len(".npz")])
