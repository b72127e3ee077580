"""PETSc options-database helpers shared by the harness."""
from __future__ import annotations

from petsc4py import PETSc

__all__ = ["set_defaults", "PETSC_REFERENCE"]

#: PETSc's own preconditioners the benchmarks measure ddlearn against, as options-database
#: entries (no prefix): one-level ASM with one block per rank and exact blocks, GAMG with its
#: defaults and *tuned* (both read the matrix's near-null space), PCMG two-level additive with
#: PETSc's GDSW coarse space (one subdomain per rank), and a sparse Cholesky with nested
#: dissection.
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
PETSC_REFERENCE = {
    "asm": {"pc_type": "asm", "pc_asm_type": "basic", "sub_pc_type": "lu"},
    "gamg": {"pc_type": "gamg"},
    "gamg-tuned": {"pc_type": "gamg", "pc_gamg_threshold": "0.01"},
    "gamg-sor": {"pc_type": "gamg", "pc_gamg_threshold": "0.01",
                 "mg_levels_ksp_type": "richardson", "mg_levels_pc_type": "sor"},
    "mg-gdsw": {"pc_type": "mg", "pc_mg_levels": "2", "pc_mg_galerkin": "both",
                "pc_mg_type": "additive", "pc_mg_adapt_interp_coarse_space": "gdsw",
                "mg_levels_pc_type": "asm", "mg_levels_pc_asm_type": "basic",
                "mg_levels_sub_pc_type": "lu", "mg_levels_ksp_type": "richardson",
                "mg_levels_ksp_max_it": "1", "mg_coarse_pc_type": "redundant",
                "mg_coarse_redundant_pc_type": "lu"},
    "cholesky": {"ksp_type": "preonly", "pc_type": "cholesky",
                 "pc_factor_mat_ordering_type": "nd"},
}


def set_defaults(prefix: str | None, defaults: dict) -> None:
    """Put ``defaults`` into the options database under ``prefix`` unless the user already set
    them, so that command-line options always win (``-{prefix}{key} value``)."""
    opts = PETSc.Options()
    prefix = prefix or ""
    for key, value in defaults.items():
        name = f"{prefix}{key}"
        if not opts.hasName(name):
            opts.setValue(name, value)
