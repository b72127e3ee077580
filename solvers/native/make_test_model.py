"""Write the inputs of the native parity tests (run by CTest before them).

    python make_test_model.py OUTDIR [n] [N]

OUTDIR/model.petsc  a learned preconditioner (perturbed away from classical) for the 2D Poisson
                    problem n x n with N subdomains, written by ddlearn.pc.export
OUTDIR/check.petsc  Vecs x and y = M^{-1} x from the Python (scipy) path, natural numbering
OUTDIR/expect.opts  -expect_iterations K: CG iterations of the Python PETSc PC for b = 1
"""
import os
import sys

import numpy as np
import petsc4py

petsc4py.init([])
from petsc4py import PETSc  # noqa: E402

from ddlearn.pc import export  # noqa: E402
from ddlearn.decomposition import Decomposition  # noqa: E402
from ddlearn.learned.operators.distributed import DistributedSchwarzAttention  # noqa: E402
from ddlearn.learned.coarse.basis import (LearnedBasis, aslinearoperator, learned_meta,  # noqa: E402
                             basis_correction_model, perturb_)
from ddlearn.learned.coarse.learned_insitu import LearnedInsitu  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.classical.krylov import solve  # noqa: E402


def main(out, n=31, N=16):
    os.makedirs(out, exist_ok=True)
    p = make_problem("poisson2d", n)
    dec = Decomposition(p.grid, N, 1)
    S = basis_correction_model(dec, 3, seed=2)
    perturb_(S, 0.2, 4)
    omega = np.linspace(-0.2, 0.6, N)
    export.export(os.path.join(out, "model.petsc"), LearnedBasis.serial(S, p, omega=omega))
    x = np.random.default_rng(1).standard_normal(p.n)
    y = aslinearoperator(S, p, omega=omega) @ x
    viewer = PETSc.Viewer().createBinary(os.path.join(out, "check.petsc"), "w", comm=PETSc.COMM_SELF)
    for v in (x, y):
        vec = PETSc.Vec().createWithArray(v, comm=PETSc.COMM_SELF)
        vec.view(viewer)
        vec.destroy()
    viewer.destroy()
    d = DistributedSchwarzAttention(S, PETSc.COMM_SELF)
    A = d.layout.matrix(p)
    d.meta.update(learned_meta("hats", omega, d.layout, A))
    b = d.layout.from_natural(np.ones(p.n))
    res = solve(A, b, lambda pc: (pc.setType("python"),
                                  pc.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(d)))), rtol=1e-8)
    with open(os.path.join(out, "expect.opts"), "w") as f:
        f.write(f"-expect_iterations {res.iterations}\n")
    print(f"wrote {out}: Python PC {res.iterations} iterations, {res.reason}")
    for o in (A, b):
        o.destroy()
    d.destroy()


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
