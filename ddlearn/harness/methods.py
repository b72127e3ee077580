"""The preconditioners compared on one problem and decomposition, by name.

Each method configures a PC on a :class:`Case`. One spelling per method: a method that is one
of ddlearn's coarse spaces is spelt as ``-ddlearn_coarse_space`` spells it (``gdsw``,
``spectral``, ``learned_insitu``), every other name is lowercase with hyphens (``gamg-tuned``,
``mg-gdsw``: PETSc's PCMG with its GDSW coarse space, ``attention-coarse``). Every method's KSP
has the options prefix :func:`prefix` (the name, hyphens as underscores, then ``_``), so
``-twolevel_ksp_monitor`` or ``-gamg_tuned_pc_gamg_threshold 0.05`` reach one method only;
defaults set here go into the options database only where the user set nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ddlearn.classical.krylov import KrylovResult, solve
from ddlearn.classical.overlapping import configure_asm
from ddlearn.classical.coarse.spectral import Spectral
from ddlearn.classical.twolevel import TwoLevelSchwarz
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.coarse import grid_basis
from ddlearn.decomposition.petsc_rows import RowLayout
from ddlearn.learned.operators import checkpoint
from ddlearn.learned.coarse.learned_insitu import LearnedInsitu
from ddlearn.pc import SchwarzAttentionPC, TwoLevelSchwarzPC, set_coordinates

from . import learned
from .options import PETSC_REFERENCE, set_defaults

__all__ = ["Case", "METHODS", "DEFAULT_METHODS", "CONTRAST_METHODS", "run_methods",
           "parse_methods", "prefix", "attention_enrichment"]


@dataclass
class Case:
    """A problem, its decomposition and coarse space, as PETSc objects on a communicator."""

    problem: object
    dec: Decomposition
    layout: RowLayout
    A: PETSc.Mat
    Phi: sp.csr_matrix
    PhiP: PETSc.Mat
    coarse: str
    #: the spectral method's coarse space (the example's -spectral_* options)
    spectral: Spectral | object = field(default_factory=Spectral)

    @classmethod
    def build(cls, problem, N: int, overlap: int, coarse: str = "hats", comm=None,
              coarse_rank: int = 0) -> "Case":
        """The case with ``A`` in ddlearn's subdomain ordering and the grid coordinates attached
        to it (so that ddlearn's options-driven PC finds them)."""
        dec = Decomposition(problem.grid, N, overlap)
        layout = RowLayout(dec, comm, coarse_rank)
        Phi = grid_basis(coarse, dec)
        A = layout.matrix(problem)
        set_coordinates(A, problem.coordinates()[layout.local_natural()])
        return cls(problem, dec, layout, A, Phi, layout.phi(Phi), coarse)

    def rhs(self, seed: int = 0) -> PETSc.Vec:
        """A random right-hand side, uniform on (-1, 1), the same for every rank count."""
        rng = np.random.default_rng(seed)
        return self.layout.from_natural(rng.uniform(-1.0, 1.0, self.dec.n))

    def describe(self) -> dict:
        return {**self.problem.describe(), **self.dec.describe(), "coarse_space": self.coarse,
                "n0": self.Phi.shape[1]}

    def destroy(self) -> None:
        self.A.destroy()
        self.PhiP.destroy()


def _none(pc, case):
    pc.setType(PETSc.PC.Type.NONE)


def _jacobi(pc, case):
    pc.setType(PETSc.PC.Type.JACOBI)


def _asm(pc, case):
    configure_asm(pc, case.layout, "basic")


def _twolevel(pc, case):
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarz(case.layout, case.PhiP, "basic"))


def _mg_gdsw(pc, case):
    # PETSc's GDSW coarse space converts A to MATIS, whose subdomains are the ranks' rows; the
    # smoother is our one-level ASM, so only the coarse space differs from `twolevel`
    # (PETSC_REFERENCE's "mg-gdsw" has PETSc's ASM as its smoother)
    set_defaults(pc.getOptionsPrefix(), {
        "pc_mg_galerkin": "both", "pc_mg_type": "additive",
        "pc_mg_adapt_interp_coarse_space": "gdsw",
        "mg_levels_ksp_type": "richardson", "mg_levels_ksp_max_it": 1,
        "mg_coarse_pc_type": "redundant", "mg_coarse_redundant_pc_type": "lu"})
    pc.setType(PETSc.PC.Type.MG)
    pc.setMGLevels(2)
    pc.setFromOptions()
    configure_asm(pc.getMGSmoother(1).getPC(), case.layout, "basic")


def _ddlearn(coarse):
    """ddlearn's options-driven PC on the case's matrix, with N and overlap of the case (box
    subdomains from the coordinates, overlap by graph layers). ``learned`` is the pretrained
    learned coarse space shipped with ddlearn (no training); ``spectral`` the case's."""
    def configure(pc, case):
        pc.setType(PETSc.PC.Type.PYTHON)
        pc.setPythonContext(TwoLevelSchwarzPC(
            case.spectral if coarse == "spectral" else coarse, case.dec.N, case.dec.overlap,
            "boxes"))
    return configure


def _gamg(pc, case):
    pc.setType(PETSc.PC.Type.GAMG)


def _gamg_tuned(pc, case):
    # GAMG as the GenEO literature compares against it (PETSC_REFERENCE's)
    set_defaults(pc.getOptionsPrefix(), {k: v for k, v in PETSC_REFERENCE["gamg-tuned"].items()
                                         if k != "pc_type"})
    pc.setType(PETSc.PC.Type.GAMG)
    pc.setFromOptions()


def _attention(pc, case, path):
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(SchwarzAttentionPC(path=path, mode="attention"))


def attention_enrichment(path: str, case: Case) -> sp.csr_matrix:
    r"""The trained paper-form operator's local factors as coarse vectors,
    :math:`[\Phi \mid R_i^TD_i^{1/2}Q_i]_i` (natural numbering): two-level Schwarz with this
    Galerkin coarse space is SPD whatever the training did, while the operator itself is
    singular (rank :math:`\le \sum_i r_i + r_0 < n`)."""
    # the problem check refuses a checkpoint of another problem, grid or dimension
    model, _ = checkpoint.load(path, problem=case.problem.describe())
    idx, sqrtD, Q = model.idx.numpy(), model.sqrtD.numpy(), model.Q.detach().numpy()
    keep = sqrtD > 0
    cols = [sp.csr_matrix(((sqrtD[i, keep[i], None] * Q[i, keep[i]]).ravel(),
                           (np.repeat(idx[i, keep[i]], Q.shape[2]),
                            np.tile(np.arange(Q.shape[2]), keep[i].sum()))),
                          shape=(case.dec.n, Q.shape[2])) for i in range(case.dec.N)]
    return sp.hstack([case.Phi, *cols]).tocsr()


def _attention_coarse(pc, case, path):
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarz(case.layout, case.layout.phi(
        attention_enrichment(path, case)), "basic"))


def _learned_insitu(pc, case, path):
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(path)))


# Learned methods: how to obtain the checkpoint (train or load from the cache), then the PC.
LEARNED = {
    "attention": (learned.attention_operator, _attention),
    "attention-coarse": (learned.attention_operator, _attention_coarse),
    "learned_insitu": (learned.learned_preconditioner, _learned_insitu),
}


METHODS = {
    "none": _none,
    "jacobi": _jacobi,
    "asm": _asm,
    "twolevel": _twolevel,
    "mg-gdsw": _mg_gdsw,
    "gdsw": _ddlearn("gdsw"),
    "nicolaides": _ddlearn("nicolaides"),
    "spectral": _ddlearn("spectral"),
    "gamg": _gamg,
    "gamg-tuned": _gamg_tuned,
    "learned": _ddlearn("learned"),
    "attention": None,
    "attention-coarse": None,
    "learned_insitu": None,
}
#: the example's default comparison
DEFAULT_METHODS = ("none", "jacobi", "asm", "twolevel", "spectral", "gamg", "gamg-tuned",
                   "mg-gdsw", "attention", "attention-coarse", "learned")
#: ... on high-contrast coefficient fields (no unpreconditioned or Jacobi CG: thousands of
#: iterations that say nothing new)
CONTRAST_METHODS = ("asm", "twolevel", "spectral", "learned", "gamg", "gamg-tuned", "mg-gdsw")


def prefix(name: str) -> str:
    """The options prefix of method ``name``'s KSP: ``gamg-tuned`` -> ``gamg_tuned_``."""
    return name.replace("-", "_") + "_"


def parse_methods(spec: str) -> list[str]:
    """Comma list of method names, validated (same answer on every rank)."""
    names = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {unknown or spec!r}; choose from "
                         f"{', '.join(METHODS)}")
    return names


def run_methods(case: Case, names, b: PETSc.Vec, ksp_type: str = "cg",
                rtol: float = 1e-8, max_it: int = 10000, settings=None) -> list[KrylovResult]:
    """Solve ``A x = b`` with each named preconditioner in turn (``names``: list or comma list).

    Learned methods first train their model or load it from the cache (``settings``, a
    :class:`ddlearn.harness.learned.LearnedSettings`); that time is the result's ``train_s``. The paper-form
    ``attention`` operator is singular, so its solve is capped at 100 iterations by default
    (``-attention_ksp_max_it``)."""
    names = parse_methods(names if isinstance(names, str) else ",".join(names))
    results = []
    for m in names:
        if ksp_type == "cg":
            # one all-reduce per iteration for both inner products: same iterates in exact
            # arithmetic, half the synchronisations on oversubscribed ranks (a harness choice;
            # the library's runner leaves the user's CG variant alone)
            set_defaults(prefix(m), {"ksp_cg_single_reduction": "true"})
        if m not in LEARNED:
            results.append(solve(case.A, b, lambda pc, f=METHODS[m]: f(pc, case), method=m,
                                 ksp_type=ksp_type, rtol=rtol, max_it=max_it, prefix=prefix(m)))
            continue
        settings = settings or learned.LearnedSettings()
        obtain, configure = LEARNED[m]
        path, train_s = obtain(case, settings)
        res = solve(case.A, b, lambda pc: configure(pc, case, path), method=m,
                    ksp_type=ksp_type, rtol=rtol,
                    max_it=min(max_it, 100) if m == "attention" else max_it, prefix=prefix(m))
        res.train_s = train_s
        results.append(res)
    return results
