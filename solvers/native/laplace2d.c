/*
  A plain PETSc KSP program that knows nothing about ddlearn: the 2D 5-point Laplacian
  h^{-2} (4 u_p - sum of neighbours) on an n x n interior grid of the unit square, natural
  (row-major, x fastest) numbering, PETSc's default row distribution, right-hand side 1.
  Prints the iteration count, the converged reason and the true relative residual.

  Checks used by the tests (generic, nothing ddlearn-specific):
    -pc_apply_check FILE   FILE holds Vecs x and y (natural numbering): fail unless
                           ||PC(x) - y|| <= 1e-12 ||y||
    -expect_iterations K   fail unless the solve took K iterations, give or take the one
                           iteration that round-off can move (the same operator applied by
                           another code converges alike, not to the same last digit)

      mpiexec -n 4 ./laplace2d -n 63 -ksp_type cg -dll_append libddlearn_petsc.so \
              -pc_type ddlearn -ddlearn_model model.petsc
*/
#include <petscksp.h>

int main(int argc, char **argv)
{
  Mat                A;
  Vec                x, b, r;
  KSP                ksp;
  PetscInt           n = 31, lo, hi, row, i, j, its, expect = -1;
  PetscReal          h2inv, rnorm, bnorm;
  KSPConvergedReason reason;
  char               check[PETSC_MAX_PATH_LEN] = "";

  PetscFunctionBeginUser;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-n", &n, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-expect_iterations", &expect, NULL));
  PetscCall(PetscOptionsGetString(NULL, NULL, "-pc_apply_check", check, sizeof(check), NULL));
  h2inv = (PetscReal)((n + 1) * (n + 1));
  PetscCall(MatCreateAIJ(PETSC_COMM_WORLD, PETSC_DECIDE, PETSC_DECIDE, n * n, n * n, 5, NULL, 4, NULL, &A));
  PetscCall(MatGetOwnershipRange(A, &lo, &hi));
  for (row = lo; row < hi; row++) {
    i = row % n;
    j = row / n;
    PetscCall(MatSetValue(A, row, row, 4.0 * h2inv, INSERT_VALUES));
    if (i > 0) PetscCall(MatSetValue(A, row, row - 1, -h2inv, INSERT_VALUES));
    if (i < n - 1) PetscCall(MatSetValue(A, row, row + 1, -h2inv, INSERT_VALUES));
    if (j > 0) PetscCall(MatSetValue(A, row, row - n, -h2inv, INSERT_VALUES));
    if (j < n - 1) PetscCall(MatSetValue(A, row, row + n, -h2inv, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecDuplicate(b, &r));
  PetscCall(VecSet(b, 1.0));
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetNormType(ksp, KSP_NORM_UNPRECONDITIONED));
  PetscCall(KSPSetTolerances(ksp, 1e-8, 0.0, PETSC_DEFAULT, PETSC_DEFAULT));
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
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "iterations %" PetscInt_FMT " reason %s true_residual %.3e\n", its, KSPConvergedReasons[reason], (double)(rnorm / bnorm)));
  PetscCheck(expect < 0 || PetscAbsInt(its - expect) <= 1, PETSC_COMM_WORLD, PETSC_ERR_PLIB, "expected %" PetscInt_FMT " iterations (+-1), got %" PetscInt_FMT, expect, its);
  PetscCall(KSPDestroy(&ksp));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&r));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
