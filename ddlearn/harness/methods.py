"""The one registry of the preconditioners compared, by name: :data:`METHODS`.

One spelling per method: a method that is one of ddlearn's coarse spaces is spelt as
``-ddlearn_coarse_space`` spells it (``gdsw``, ``spectral``, ``learned_insitu``), every other
name is lowercase with hyphens (``gamg-tuned``, ``mg-gdsw``: PETSc's PCMG with its GDSW coarse
space, ``attention-coarse``). A :class:`Method` is PETSc options (PETSc's own preconditioners:
the studies set them under a prefix of their own), a set-up on the main job's :class:`Case`
(ddlearn's subdomains), or both. Every method's KSP in the main job has the options prefix
:func:`prefix` (the name, hyphens as underscores, then ``_``), so ``-twolevel_ksp_monitor`` or
``-gamg_tuned_pc_gamg_threshold 0.05`` reach one method only; defaults set here go into the
options database only where the user set nothing (:func:`set_defaults`).

Nothing here loads torch until a learned method runs: the classical studies need no learned
extra.
"""
from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Callable

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
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates
from ddlearn.pc.registry import load

__all__ = ["Case", "Method", "METHODS", "MAIN_JOB", "LEARNED", "DEFAULT_METHODS",
           "CONTRAST_METHODS", "default_methods", "run_methods", "parse_methods", "prefix", "set_defaults"]


def set_defaults(prefix: str | None, defaults: dict) -> None:
    """Put ``defaults`` into the options database under ``prefix`` unless the user already set
    them, so that command-line options always win (``-{prefix}{key} value``)."""
    opts = PETSc.Options()
    for key, value in defaults.items():
        if not opts.hasName(f"{prefix or ''}{key}"):
            opts.setValue(f"{prefix or ''}{key}", value)


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


def _asm(pc, case):
    configure_asm(pc, case.layout, "basic")


def _twolevel(pc, case):
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarz(case.layout, case.PhiP, "basic"))


def _mg_gdsw(pc, case):
    # PETSc's GDSW coarse space converts A to MATIS, whose subdomains are the ranks' rows; the
    # smoother is our one-level ASM on the case's subdomains, so only the coarse space differs
    # from `twolevel` (the entry's options have PETSc's ASM, one block per rank, as smoother)
    set_defaults(pc.getOptionsPrefix(), {
        k: v for k, v in METHODS["mg-gdsw"].options.items() if k not in (
            "pc_type", "pc_mg_levels", "mg_levels_pc_type", "mg_levels_pc_asm_type",
            "mg_levels_sub_pc_type")})
    pc.setType(PETSc.PC.Type.MG)
    pc.setMGLevels(2)
    pc.setFromOptions()
    configure_asm(pc.getMGSmoother(1).getPC(), case.layout, "basic")


def _ddlearn(coarse):
    """ddlearn's options-driven PC on the case's matrix, with N and overlap of the case (box
    subdomains from the coordinates, overlap by graph layers). ``learned`` and
    ``schwarz_attention`` are the pretrained learned coarse spaces shipped with ddlearn (no
    training); ``spectral`` the case's."""
    def configure(pc, case):
        pc.setType(PETSc.PC.Type.PYTHON)
        pc.setPythonContext(TwoLevelSchwarzPC(
            case.spectral if coarse == "spectral" else coarse, case.dec.N, case.dec.overlap,
            "boxes"))
    return configure


@dataclass(frozen=True)
class Method:
    """One preconditioner of the comparisons.

    Attributes
    ----------
    options
        PETSc options-database entries (no prefix) that make it, for PETSc's own
        preconditioners: a study sets them under its prefix and reads them with
        ``setFromOptions``; the main job does the same where ``configure`` is None
    configure
        ``(pc, case)``: its set-up on the main job's :class:`Case`, on the case's subdomains
        (where PETSc's ASM of ``options`` has one block per rank); for a learned method the
        ``"module:name"`` of ``(pc, case, checkpoint) -> None``
    learned
        the ``"module:name"`` of the function that trains the method's model or loads it from
        the cache, ``(case, settings) -> (path, train_s)``; both are imported when the method
        runs (:func:`ddlearn.pc.registry.load`: torch only for learned methods)
    one_rank
        a factorisation PETSc has on one rank only (no parallel direct solver in this build):
        a study factors on rank 0; not in the main job
    """

    options: dict = field(default_factory=dict)
    configure: Callable | str | None = None
    learned: str | None = None
    one_rank: bool = False


#: the learned methods' torch side, imported when one runs
_LEARNED = "ddlearn.harness.learned"

#: The one registry, one entry per method, for the main job and every study. PETSc's own:
#: ASM with exact blocks and the basic restriction; GAMG with its defaults and *tuned* (both
#: read the matrix's near-null space); PCMG two-level additive with PETSc's GDSW coarse space;
#: a sparse Cholesky with nested dissection.
#:
#: ``gamg-tuned`` is GAMG as the GenEO literature compares against it: a drop threshold of
#: 0.01 on the strength graph (the range 0.01-0.05 the literature tunes in), Chebyshev/Jacobi
#: smoothing (PETSc's default). With its defaults (threshold -1: keep every edge) GAMG needs
#: 171 CG iterations on 3D inclusions of contrast 1e6 at 32^3 where 0.01 needs 14: the
#: defaults are no baseline for high contrast.
#:
#: ``gamg-sor`` is the same with symmetric SOR sweeps (Richardson) as the smoother instead of
#: Chebyshev/Jacobi: Chebyshev's bounds come from an estimate of the largest eigenvalue of the
#: Jacobi-scaled level operator, which stiff inclusions in elasticity make too low, and then the
#: V-cycle is indefinite (``DIVERGED_INDEFINITE_PC`` under CG after 4 iterations on the
#: time-to-solution study's P1 inclusions, 9 450 dofs, with the estimate's 50 iterations too);
#: SSOR needs no estimate and keeps the cycle SPD (26 iterations there).
#:
#: ``mg-gdsw`` has one subdomain per rank, always: PETSc builds its GDSW space on the matrix
#: converted to MATIS, one local subdomain per process. It is therefore measured where a study's
#: subdomains are its ranks (time to solution, weak scaling, the elasticity study, the main
#: job), not in the studies that fix N apart from the rank count (16-256 subdomains on 2 ranks).
METHODS = {
    "none": Method({"pc_type": "none"}),
    "jacobi": Method({"pc_type": "jacobi"}),
    "asm": Method({"pc_type": "asm", "pc_asm_type": "basic", "sub_pc_type": "lu"}, _asm),
    "twolevel": Method(configure=_twolevel),
    "mg-gdsw": Method({"pc_type": "mg", "pc_mg_levels": "2", "pc_mg_galerkin": "both",
                       "pc_mg_type": "additive", "pc_mg_adapt_interp_coarse_space": "gdsw",
                       "mg_levels_pc_type": "asm", "mg_levels_pc_asm_type": "basic",
                       "mg_levels_sub_pc_type": "lu", "mg_levels_ksp_type": "richardson",
                       "mg_levels_ksp_max_it": "1", "mg_coarse_pc_type": "redundant",
                       "mg_coarse_redundant_pc_type": "lu"}, _mg_gdsw),
    "gdsw": Method(configure=_ddlearn("gdsw")),
    "nicolaides": Method(configure=_ddlearn("nicolaides")),
    "spectral": Method(configure=_ddlearn("spectral")),
    "gamg": Method({"pc_type": "gamg"}),
    "gamg-tuned": Method({"pc_type": "gamg", "pc_gamg_threshold": "0.01"}),
    "gamg-sor": Method({"pc_type": "gamg", "pc_gamg_threshold": "0.01",
                        "mg_levels_ksp_type": "richardson", "mg_levels_pc_type": "sor"}),
    "cholesky": Method({"ksp_type": "preonly", "pc_type": "cholesky",
                        "pc_factor_mat_ordering_type": "nd"}, one_rank=True),
    "learned": Method(configure=_ddlearn("learned")),
    "schwarz_attention": Method(configure=_ddlearn("schwarz_attention")),
    "attention": Method(configure=f"{_LEARNED}:configure_attention",
                        learned=f"{_LEARNED}:attention_operator"),
    "attention-coarse": Method(configure=f"{_LEARNED}:configure_attention_coarse",
                               learned=f"{_LEARNED}:attention_operator"),
    "learned_insitu": Method(configure=f"{_LEARNED}:configure_learned_insitu",
                             learned=f"{_LEARNED}:learned_preconditioner"),
}
#: the main job's methods (``-methods``) and among them the learned ones
MAIN_JOB = tuple(name for name, m in METHODS.items() if not m.one_rank)
LEARNED = tuple(name for name, m in METHODS.items() if m.learned)
#: the example's default comparison
DEFAULT_METHODS = ("none", "jacobi", "asm", "twolevel", "spectral", "gamg", "gamg-tuned",
                   "mg-gdsw", "attention", "attention-coarse", "learned", "schwarz_attention")
#: ... on high-contrast coefficient fields (no unpreconditioned or Jacobi CG: thousands of
#: iterations that say nothing new)
CONTRAST_METHODS = ("asm", "twolevel", "spectral", "learned", "schwarz_attention", "gamg",
                    "gamg-tuned", "mg-gdsw")


def default_methods(problem: str, dim: int) -> list[str]:
    """The main job's methods for ``problem`` (:data:`DEFAULT_METHODS` on Poisson,
    :data:`CONTRAST_METHODS` on the coefficient fields), less ``schwarz_attention`` where no
    model is shipped for dimension ``dim`` (only 2D is)."""
    names = DEFAULT_METHODS if problem.startswith("poisson") else CONTRAST_METHODS
    shipped = load("ddlearn.learned.coarse.schwarz_attention:PRETRAINED_ATTENTION")
    return [m for m in names if m != "schwarz_attention"
            or os.path.exists(shipped.get(dim, ""))]


def prefix(name: str) -> str:
    """The options prefix of method ``name``'s KSP: ``gamg-tuned`` -> ``gamg_tuned_``."""
    return name.replace("-", "_") + "_"


def parse_methods(spec: str) -> list[str]:
    """Comma list of method names, validated (same answer on every rank)."""
    names = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in names if m not in MAIN_JOB]
    if unknown or not names:
        raise ValueError(f"unknown method(s) {unknown or spec!r}; choose from "
                         f"{', '.join(MAIN_JOB)}")
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
        method, path, train_s = METHODS[m], None, 0.0
        if method.learned:
            path, train_s = load(method.learned)(
                case, settings or load(f"{_LEARNED}:LearnedSettings")())
        res = solve(case.A, b, lambda pc: _configure(pc, case, method, path), method=m,
                    ksp_type=ksp_type, rtol=rtol,
                    max_it=min(max_it, 100) if m == "attention" else max_it, prefix=prefix(m))
        res.train_s = train_s
        results.append(res)
    return results


def _configure(pc, case: Case, method: Method, path: str | None) -> None:
    """``method``'s set-up on ``case``: its own, or its options under the KSP's prefix."""
    if method.configure is None:
        set_defaults(pc.getOptionsPrefix(), method.options)
        pc.setFromOptions()
    elif method.learned:
        load(method.configure)(pc, case, path)
    else:
        method.configure(pc, case)
