/*
  A plain PETSc KSP program, as a C user writes one, that knows nothing about ddlearn: the
  Laplacian on the unit square or cube, h^{-2} (2d u_p - sum of the 2d neighbours), 5-point in
  2D or 7-point in 3D, n points per direction (h = 1/(n+1), homogeneous Dirichlet boundary),
  natural numbering (x fastest), assembled in PETSc's default row distribution; right-hand
  side 1. The solver is whatever the options say (KSPSetFromOptions). Prints the iteration
  count, the converged reason and the true relative residual ||b - A x|| / ||b||.

    -dim {2,3}          dimension (default 2)
    -n N                points per direction (default 31)
    -max_residual R     fail unless the solve converged with a true relative residual <= R
    -expect_iterations K   fail unless the solve took K iterations, give or take the one
                        iteration that round-off can move (the same operator applied by another
                        code converges alike, not to the same last digit)
    -pc_apply_check FILE   FILE holds Vecs x and y (natural numbering): fail unless
                        ||PC(x) - y|| <= 1e-12 ||y||
    -aux                hand a domain-decomposition PC this rank's overlapping subdomain (its
                        rows grown by one grid layer, n^(dim-1) rows each side) and that
                        subdomain's Neumann matrix, the way PCHPDDMSetAuxiliaryMat takes one:
                        composed on the matrix (PetscObjectCompose) under the names ddlearn's PC
                        reads (ddlearn_subdomains_overlapping, ddlearn_subdomain_offsets,
                        ddlearn_auxiliary_0)
    -near_null_space    attach the constant and the x coordinate as the matrix's near-null
                        space (MatSetNearNullSpace), as an elasticity code attaches its
                        rigid-body modes

  ddlearn's Python preconditioner from this program: PETSc starts Python when it is given
  -python (the interpreter whose site-packages hold petsc4py and ddlearn), and PETSC_DIR must be
  the PETSc that this program is linked with (the one petsc4py uses):

    PETSC_DIR=$(python -c "import petsc; print(petsc.get_petsc_dir())") \
    mpiexec -n 4 build/c_client -python "$(which python)" -ksp_type cg \
            -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC

  ddlearn's native plugin (an exported learned preconditioner, no Python at run time):

    mpiexec -n 4 build/c_client -n 63 -ksp_type cg -dll_append build/libddlearn_petsc.so \
            -pc_type ddlearn -ddlearn_model model.petsc
*/
#include <petscksp.h>

/* The Neumann matrix of the rows [start, end): the difference stencil assembled edge by edge,
   h^{-2} (u_p - u_q) for each grid edge with both ends inside, h^{-2} u_p for each edge to the
   Dirichlet boundary; edges leaving the subdomain into the domain are left out. Its rows and
   columns are numbered start, start + 1, ... from 0. */
static PetscErrorCode NeumannMatrix(PetscInt dim, PetscInt n, PetscInt start, PetscInt end, PetscReal h2inv, Mat *AN)
{
  PetscInt    row, d, ncols, c[3], cols[7];
  PetscScalar vals[7];

  PetscFunctionBeginUser;
  PetscCall(MatCreateSeqAIJ(PETSC_COMM_SELF, end - start, end - start, 2 * dim + 1, NULL, AN));
  for (row = start; row < end; row++) {
    PetscInt stride = 1, local = row - start;

    c[0]    = row % n;
    c[1]    = (row / n) % n;
    c[2]    = row / (n * n);
    cols[0] = local;
    vals[0] = 0.0;
    ncols   = 1;
    for (d = 0; d < dim; d++, stride *= n) {
      PetscInt q;

      for (q = -1; q <= 1; q += 2) {
        PetscInt nb = row + q * stride;

        if ((q < 0 && c[d] == 0) || (q > 0 && c[d] == n - 1)) vals[0] += h2inv; /* Dirichlet */
        else if (nb >= start && nb < end) {
          vals[0] += h2inv;
          cols[ncols]   = nb - start;
          vals[ncols++] = -h2inv;
        }
      }
    }
    PetscCall(MatSetValues(*AN, 1, &local, ncols, cols, vals, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(*AN, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(*AN, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(PETSC_SUCCESS);
}

int main(int argc, char **argv)
{
  Mat                A;
  Vec                x, b, r;
  KSP                ksp;
  PetscInt           dim = 2, n = 31, N, lo, hi, row, c[3], d, its, ncols, expect = -1;
  PetscInt           cols[7];
  PetscScalar        vals[7];
  PetscReal          h2inv, rnorm, bnorm, max_residual = -1.0;
  KSPConvergedReason reason;
  char               check[PETSC_MAX_PATH_LEN] = "";
  PetscBool          aux = PETSC_FALSE, nearnull = PETSC_FALSE;

  PetscFunctionBeginUser;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-dim", &dim, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
  PetscCall(PetscOptionsGetReal(NULL, NULL, "-max_residual", &max_residual, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-expect_iterations", &expect, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-pc_apply_check", check, sizeof(check), NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-aux", &aux, NULL));
  PetscCall(PetscOptionsGetBool(NULL, NULL, "-near_null_space", &nearnull, NULL));
  PetscCheck(dim == 2 || dim == 3, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-dim must be 2 or 3, not %" PetscInt_FMT, dim);
  PetscCheck(n > 0, PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE, "-n must be positive, not %" PetscInt_FMT, n);
  N     = dim == 2 ? n * n : n * n * n;
  h2inv = (PetscReal)((n + 1) * (n + 1));

  PetscCall(MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, N, N, 2 * dim + 1, NULL, 2 * dim, NULL, &A));
  PetscCall(MatGetOwnershipRange(A, &lo, &hi));
  for (row = lo; row < hi; row++) {
    PetscInt stride = 1;

    c[0]    = row % n;
    c[1]    = (row / n) % n;
    c[2]    = row / (n * n);
    cols[0] = row;
    vals[0] = 2.0 * dim * h2inv;
    ncols   = 1;
    for (d = 0; d < dim; d++, stride *= n) {
      if (c[d] > 0) {
        cols[ncols]   = row - stride;
        vals[ncols++] = -h2inv;
      }
      if (c[d] < n - 1) {
        cols[ncols]   = row + stride;
        vals[ncols++] = -h2inv;
      }
    }
    PetscCall(MatSetValues(A, 1, &row, ncols, cols, vals, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(VecSet(b, 1.0));
  if (aux) {
    PetscInt layer = dim == 2 ? n : n * n, start = PetscMax(0, lo - layer), end = PetscMin(N, hi + layer);
    PetscInt offsets[2] = {0, end - start};
    IS       rows, parts;
    Mat      AN;

    PetscCall(ISCreateStride(PETSC_COMM_SELF, end - start, start, 1, &rows));
    PetscCall(ISCreateGeneral(PETSC_COMM_SELF, 2, offsets, PETSC_COPY_VALUES, &parts));
    PetscCall(NeumannMatrix(dim, n, start, end, h2inv, &AN));
    PetscCall(PetscObjectCompose((PetscObject)A, "ddlearn_subdomains_overlapping", (PetscObject)rows));
    PetscCall(PetscObjectCompose((PetscObject)A, "ddlearn_subdomain_offsets", (PetscObject)parts));
    PetscCall(PetscObjectCompose((PetscObject)A, "ddlearn_auxiliary_0", (PetscObject)AN));
    PetscCall(ISDestroy(&rows));
    PetscCall(ISDestroy(&parts));
    PetscCall(MatDestroy(&AN));
  }
  if (nearnull) {
    Vec          X;
    MatNullSpace nsp;

    PetscCall(VecDuplicate(b, &X));
    for (row = lo; row < hi; row++) PetscCall(VecSetValue(X, row, (PetscScalar)(row % n + 1) / (n + 1) - 0.5, INSERT_VALUES)); /* orthogonal to the constant */
    PetscCall(VecAssemblyBegin(X));
    PetscCall(VecAssemblyEnd(X));
    PetscCall(VecNormalize(X, NULL));
    PetscCall(MatNullSpaceCreate(PETSC_COMM_WORLD, PETSC_TRUE, 1, &X, &nsp));
    PetscCall(MatSetNearNullSpace(A, nsp));
    PetscCall(MatNullSpaceDestroy(&nsp));
    PetscCall(VecDestroy(&X));
  }

  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  if (check[0]) {
    PetscViewer viewer;
    Vec         cx, cy, py;
    PC          pc;
    PetscReal   err, ynorm;

    PetscCall(PetscViewerBinaryOpen(PETSC_COMM_WORLD, check, FILE_MODE_READ, &viewer));
    PetscCall(VecDuplicate(b, &cx));
    PetscCall(VecDuplicate(b, &cy));
    PetscCall(VecDuplicate(b, &py));
    PetscCall(VecLoad(cx, viewer));
    PetscCall(VecLoad(cy, viewer));
    PetscCall(PetscViewerDestroy(&viewer));
    PetscCall(KSPGetPC(ksp, &pc));
    PetscCall(PCApply(pc, cx, py));
    PetscCall(VecAXPY(py, -1.0, cy));
    PetscCall(VecNorm(py, NORM_2, &err));
    PetscCall(VecNorm(cy, NORM_2, &ynorm));
    PetscCall(PetscPrintf(PETSC_COMM_WORLD, "apply_error %.3e\n", (double)(err / ynorm)));
    PetscCheck(err <= 1e-12 * ynorm, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "preconditioner apply differs from the reference by %g (relative)", (double)(err / ynorm));
    PetscCall(VecDestroy(&cx));
    PetscCall(VecDestroy(&cy));
    PetscCall(VecDestroy(&py));
  }
  PetscCall(KSPSolve(ksp, b, x));

  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PetscCall(MatMult(A, x, r));
  PetscCall(VecAYPX(r, -1.0, b));
  PetscCall(VecNorm(r, NORM_2, &rnorm));
  PetscCall(VecNorm(b, NORM_2, &bnorm));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%" PetscInt_FMT "D n = %" PetscInt_FMT " (%" PetscInt_FMT " unknowns): iterations %" PetscInt_FMT " reason %s true_residual %.3e\n", dim, n, N, its, KSPConvergedReasons[reason], (double)(rnorm / bnorm)));
  PetscCheck(expect < 0 || PetscAbsInt(its - expect) <= 1, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "expected %" PetscInt_FMT " iterations (+-1), got %" PetscInt_FMT, expect, its);
  PetscCheck(max_residual < 0 || (reason > 0 && rnorm <= max_residual * bnorm), PETSC_COMM_WORLD, PETSC_ERR_NOT_CONVERGED, "the solve did not converge to a true relative residual <= %g (reason %s, residual %.3e)", (double)max_residual, KSPConvergedReasons[reason], (double)(rnorm / bnorm));

  PetscCall(KSPDestroy(&ksp));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&r));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
