r"""``learned``: the learned local coarse space (:mod:`ddlearn.learned.coarse.local_coarse`): a network
on each subdomain's local Neumann matrix gives start vectors, a block Krylov Rayleigh–Ritz step
on the spectral pencil finishes them; coarse vectors :math:`R_i^TD_iV_i`.

Options (``-<prefix>ddlearn_learned_``): ``model FILE`` (default the pretrained model shipped
with ddlearn), ``nev k`` (vectors per subdomain, default the model's), ``steps s`` (block Krylov
steps, default the model's ``serve_steps``), ``start {network,random}`` (where the refinement
starts: the network's vectors, default, or seeded random ones of the same number, the baseline
that shows what the network adds).
"""
from __future__ import annotations

import os

from mpi4py import MPI
from petsc4py import PETSc

from ...classical.coarse_space import CoarseInput, CoarseSpace, CoarseVectors
from ...decomposition.collective import collective_check
from .local_coarse import PRETRAINED, STARTS, check_inputs, learned_entries, load_model

__all__ = ["Learned"]


class Learned(CoarseSpace):
    name = "learned"
    value_dependent = True

    def __init__(self, model: str | None = None, nev: int | None = None,
                 steps: int | None = None, start: str = "network"):
        super().__init__()
        self.model, self.nev, self.steps, self.start = model, nev, steps, start
        self._loaded = None  # (path, model, meta)

    def set_from_options(self, prefix: str) -> None:
        opts = self.options(prefix)
        # petsc4py treats a default of None as "required": '' and -1 stand for "not given"
        self.model = opts.getString("model", self.model or "") or None
        self.nev = opts.getInt("nev", self.nev or 0) or None
        steps = opts.getInt("steps", -1 if self.steps is None else self.steps)
        self.steps = None if steps < 0 else steps
        self.start = opts.getString("start", self.start)

    def _load(self, comm):
        """The model, read once (every rank reads the file; a bad file fails on every rank)."""
        path = self.model or PRETRAINED
        if self._loaded is not None and self._loaded[0] == path:
            return self._loaded
        collective_check(comm, os.path.exists(path),
                         f"no learned coarse-space model at {path}: give -ddlearn_learned_model "
                         f"FILE (train one with python -m ddlearn.learned.coarse.local_training)")
        try:
            loaded, error = load_model(path), None
        except (ValueError, OSError) as e:
            loaded, error = None, str(e)
        collective_check(comm, error is None, str(error))
        self._loaded = (path, *loaded[:2])
        return self._loaded

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        comm = inp.comm
        path, model, meta = self._load(comm)
        trained = meta["train_config"]
        collective_check(comm, inp.block_size == 1,
                         f"the learned coarse-space model {os.path.basename(path)} was trained "
                         f"on scalar diffusion (block size 1), and this matrix has block size "
                         f"{inp.block_size}: use -ddlearn_coarse_space spectral, gdsw, rgdsw "
                         f"or nicolaides for vector problems")
        collective_check(comm, self.start in STARTS,
                         f"unknown -ddlearn_learned_start {self.start!r}; choose one of "
                         f"{', '.join(STARTS)}")
        nev = self.nev or trained["k"]
        steps = trained["serve_steps"] if self.steps is None else self.steps
        collective_check(comm, nev <= model.config["vectors"] * (steps + 1),
                         f"-ddlearn_learned_nev {nev} exceeds the {model.config['vectors']} x "
                         f"{steps + 1} dimensions of the refinement space: raise "
                         f"-ddlearn_learned_steps")
        out, stats, timing = learned_entries(inp.A, inp.subdomains, model, nev, steps,
                                             inp.auxiliary, self.start)
        warnings = check_inputs(comm, meta, stats, inp.subdomains.overlap)
        if warnings and comm.getRank() == 0:
            PETSc.Sys.Print("Warning: " + "; ".join(warnings))
        mpi = comm.tompi4py()
        self.found = {"model": path, "vectors": out.n0, "nev": nev, "steps": steps,
                      "start": self.start,
                      "warnings": warnings,
                      **{key: mpi.allreduce(v, op=MPI.MAX) for key, v in timing.items()}}
        return out

    def view(self, viewer: PETSc.Viewer) -> None:
        m = self.found
        if not m:
            return super().view(viewer)
        viewer.printfASCII(f"  learned coarse space (model {os.path.basename(m['model'])}): "
                           f"{m['vectors']} local vectors ({m['nev']} per subdomain, "
                           f"{m['steps']} block Krylov steps from {m['start']} start "
                           f"vectors)\n")
