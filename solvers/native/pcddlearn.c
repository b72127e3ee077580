/*
  PCDDLEARN: the learned two-level Schwarz preconditioner of ddlearn as a native PETSc PC.

      M^{-1} = sum_i R_i^T A_i^{-1} R_i + Phi~ (Phi~^T A Phi~)^{-1} Phi~^T

  read from a file written by ddlearn.pc.export (format documented there: header Vec, overlapping
  and owned index sets in natural numbering, Phi~ as AIJ). The local part is PCASM on those index
  sets (basic for mode 0, restrict for mode 1; sub-solves default to LU, options prefix
  ddlearn_local_), the coarse part a Galerkin matrix factored and solved on rank 0 (options
  prefix ddlearn_coarse_). Load with

      -dll_append libddlearn_petsc.so -pc_type ddlearn -ddlearn_model FILE
*/
#include <petsc/private/pcimpl.h>

#define DDLEARN_MAGIC   20261129.0
#define DDLEARN_VERSION 1

typedef struct {
  char     model[PETSC_MAX_PATH_LEN];
  PetscInt n, N, n0, mode, overlap;
  PC       local;
  KSP      coarse; /* sequential, on rank 0 only */
  Mat      Phi, A0;
  Vec      xc, yc;
} PC_DDLearn;

/* Owner of a global row under the matrix's row distribution. */
static PetscMPIInt DDLearnOwner(const PetscInt *ranges, PetscMPIInt size, PetscInt row)
{
  PetscMPIInt r = 0;
  while (r < size - 1 && row >= ranges[r + 1]) r++;
  return r;
}

static PetscErrorCode DDLearnLoadAll(MPI_Comm comm, PetscViewer viewer, IS *all)
{
  IS is;

  PetscFunctionBegin;
  PetscCall(ISCreate(comm, &is));
  PetscCall(ISLoad(is, viewer));
  PetscCall(ISAllGather(is, all));
  PetscCall(ISDestroy(&is));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCReset_DDLearn(PC pc)
{
  PC_DDLearn *dd = (PC_DDLearn *)pc->data;

  PetscFunctionBegin;
  PetscCall(PCDestroy(&dd->local));
  PetscCall(KSPDestroy(&dd->coarse));
  PetscCall(MatDestroy(&dd->Phi));
  PetscCall(MatDestroy(&dd->A0));
  PetscCall(VecDestroy(&dd->xc));
  PetscCall(VecDestroy(&dd->yc));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCSetUp_DDLearn(PC pc)
{
  PC_DDLearn        *dd = (PC_DDLearn *)pc->data;
  MPI_Comm           comm;
  PetscMPIInt        size, rank;
  PetscViewer        viewer;
  Vec                header, hall;
  VecScatter         toall;
  const PetscScalar *h;
  IS                 sets[4], *over, *owned;
  const PetscInt    *off[2], *idx[2];
  PetscInt           count, M, m, i, k, s;
  const PetscInt    *ranges;
  PetscBool          exists;
  const char        *prefix;
  char               name[256];
  PC                 cpc;

  PetscFunctionBegin;
  PetscCall(PCReset_DDLearn(pc));
  PetscCall(PetscObjectGetComm((PetscObject)pc, &comm));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCheck(dd->model[0], comm, PETSC_ERR_USER_INPUT, "PCDDLEARN needs a model: give -ddlearn_model FILE (written by ddlearn.pc.export)");
  PetscCall(PetscTestFile(dd->model, 'r', &exists));
  PetscCheck(exists, comm, PETSC_ERR_FILE_OPEN, "PCDDLEARN: no readable model file %s", dd->model);
  PetscCall(PetscViewerBinaryOpen(comm, dd->model, FILE_MODE_READ, &viewer));

  PetscCall(VecCreate(comm, &header));
  PetscCall(VecLoad(header, viewer));
  PetscCall(VecScatterCreateToAll(header, &toall, &hall));
  PetscCall(VecScatterBegin(toall, header, hall, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecScatterEnd(toall, header, hall, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecGetSize(hall, &k));
  PetscCall(VecGetArrayRead(hall, &h));
  PetscCheck(k == 8 && PetscRealPart(h[0]) == DDLEARN_MAGIC, comm, PETSC_ERR_FILE_UNEXPECTED, "PCDDLEARN: %s is not a ddlearn export (bad header)", dd->model);
  PetscCheck((PetscInt)PetscRealPart(h[1]) == DDLEARN_VERSION, comm, PETSC_ERR_FILE_UNEXPECTED, "PCDDLEARN: %s has export version %" PetscInt_FMT "; this plugin reads version %d: export the model again", dd->model, (PetscInt)PetscRealPart(h[1]), DDLEARN_VERSION);
  dd->n       = (PetscInt)PetscRealPart(h[2]);
  dd->N       = (PetscInt)PetscRealPart(h[3]);
  dd->n0      = (PetscInt)PetscRealPart(h[4]);
  dd->mode    = (PetscInt)PetscRealPart(h[5]);
  dd->overlap = (PetscInt)PetscRealPart(h[6]);
  PetscCall(VecRestoreArrayRead(hall, &h));
  PetscCall(VecScatterDestroy(&toall));
  PetscCall(VecDestroy(&hall));
  PetscCall(VecDestroy(&header));

  PetscCall(MatGetSize(pc->pmat, &M, NULL));
  PetscCheck(M == dd->n, comm, PETSC_ERR_ARG_SIZ, "PCDDLEARN: model %s was made for n = %" PetscInt_FMT " unknowns, the matrix has %" PetscInt_FMT ": export a model trained for this problem", dd->model, dd->n, M);
  PetscCheck(size <= dd->N, comm, PETSC_ERR_ARG_OUTOFRANGE, "PCDDLEARN: %d ranks but the model has only %" PetscInt_FMT " subdomains: run with at most %" PetscInt_FMT " ranks", size, dd->N, dd->N);

  /* Index sets of this rank's subdomains (natural numbering, as the matrix). */
  for (i = 0; i < 4; i++) PetscCall(DDLearnLoadAll(comm, viewer, &sets[i]));
  for (i = 0; i < 2; i++) {
    PetscCall(ISGetIndices(sets[2 * i], &off[i]));
    PetscCall(ISGetIndices(sets[2 * i + 1], &idx[i]));
  }
  /* Subdomain s goes to the rank that owns the middle of its owned rows, so the local solves
     gather mostly local rows whatever the matrix's distribution (natural numbering here). */
  PetscCall(MatGetOwnershipRanges(pc->pmat, &ranges));
  for (count = 0, s = 0; s < dd->N; s++)
    if (DDLearnOwner(ranges, size, idx[1][(off[1][s] + off[1][s + 1]) / 2]) == rank) count++;
  PetscCall(PetscMalloc2(count, &over, count, &owned));
  for (k = 0, s = 0; s < dd->N; s++) {
    if (DDLearnOwner(ranges, size, idx[1][(off[1][s] + off[1][s + 1]) / 2]) != rank) continue;
    PetscCall(ISCreateGeneral(PETSC_COMM_SELF, off[0][s + 1] - off[0][s], idx[0] + off[0][s], PETSC_COPY_VALUES, &over[k]));
    PetscCall(ISCreateGeneral(PETSC_COMM_SELF, off[1][s + 1] - off[1][s], idx[1] + off[1][s], PETSC_COPY_VALUES, &owned[k]));
    k++;
  }
  for (i = 0; i < 2; i++) {
    PetscCall(ISRestoreIndices(sets[2 * i], &off[i]));
    PetscCall(ISRestoreIndices(sets[2 * i + 1], &idx[i]));
  }
  for (i = 0; i < 4; i++) PetscCall(ISDestroy(&sets[i]));

  /* Phi~ in the matrix's row layout. */
  PetscCall(MatGetLocalSize(pc->pmat, &m, NULL));
  PetscCall(MatCreate(comm, &dd->Phi));
  /* All coarse columns on rank 0: Phi~^T x lands there in one gather, as in the Python PC. */
  PetscCall(MatSetSizes(dd->Phi, m, rank == 0 ? dd->n0 : 0, dd->n, dd->n0));
  PetscCall(MatSetType(dd->Phi, MATAIJ));
  PetscCall(MatLoad(dd->Phi, viewer));
  PetscCall(PetscViewerDestroy(&viewer));

  PetscCall(PCGetOptionsPrefix(pc, &prefix));
  /* Local part: PCASM on our index sets; the overlap is already in them. */
  PetscCall(PCCreate(comm, &dd->local));
  PetscCall(PCSetOptionsPrefix(dd->local, prefix));
  PetscCall(PCAppendOptionsPrefix(dd->local, "ddlearn_local_"));
  PetscCall(PCSetOperators(dd->local, pc->mat, pc->pmat));
  PetscCall(PCSetType(dd->local, PCASM));
  PetscCall(PCASMSetType(dd->local, dd->mode == 0 ? PC_ASM_BASIC : PC_ASM_RESTRICT));
  PetscCall(PCASMSetOverlap(dd->local, 0));
  PetscCall(PCASMSetLocalSubdomains(dd->local, count, over, owned));
  PetscCall(PetscSNPrintf(name, sizeof(name), "-%sddlearn_local_sub_pc_type", prefix ? prefix : ""));
  PetscCall(PetscOptionsHasName(NULL, NULL, name, &exists));
  if (!exists) PetscCall(PetscOptionsSetValue(NULL, name, "lu"));
  PetscCall(PCSetFromOptions(dd->local));
  PetscCall(PCSetUp(dd->local));
  for (k = 0; k < count; k++) {
    PetscCall(ISDestroy(&over[k]));
    PetscCall(ISDestroy(&owned[k]));
  }
  PetscCall(PetscFree2(over, owned));

  /* Coarse part: all n_0 columns of Phi~ live on rank 0, so Phi~^T x lands there; rank 0 alone
     factors the Galerkin matrix (sequential copy of A0, LU by default, options prefix
     ddlearn_coarse_) and solves, as the Python PC does. */
  {
    Mat       A0par, *seq;
    IS        want;
    PetscInt  n0here = rank == 0 ? dd->n0 : 0;

    PetscCall(MatPtAP(pc->pmat, dd->Phi, MAT_INITIAL_MATRIX, PETSC_DETERMINE, &A0par));
    PetscCall(ISCreateStride(PETSC_COMM_SELF, n0here, 0, 1, &want));
    PetscCall(MatCreateSubMatrices(A0par, 1, &want, &want, MAT_INITIAL_MATRIX, &seq));
    dd->A0 = seq[0];
    PetscCall(PetscFree(seq));
    PetscCall(ISDestroy(&want));
    PetscCall(MatDestroy(&A0par));
    if (rank == 0) {
      PetscCall(KSPCreate(PETSC_COMM_SELF, &dd->coarse));
      PetscCall(KSPSetOptionsPrefix(dd->coarse, prefix));
      PetscCall(KSPAppendOptionsPrefix(dd->coarse, "ddlearn_coarse_"));
      PetscCall(KSPSetOperators(dd->coarse, dd->A0, dd->A0));
      PetscCall(KSPSetType(dd->coarse, KSPPREONLY));
      PetscCall(KSPGetPC(dd->coarse, &cpc));
      PetscCall(PCSetType(cpc, PCLU));
      PetscCall(KSPSetFromOptions(dd->coarse));
      PetscCall(KSPSetUp(dd->coarse));
    }
  }
  PetscCall(MatCreateVecs(dd->Phi, &dd->xc, NULL));
  PetscCall(VecDuplicate(dd->xc, &dd->yc));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* yc = A0^{-1} xc (or A0^{-T}) on rank 0, through sequential views of the coarse vectors. */
static PetscErrorCode DDLearnCoarseSolve(PC_DDLearn *dd, PetscBool transpose)
{
  Vec          xs, ys;
  PetscScalar *xa, *ya;

  PetscFunctionBegin;
  if (!dd->coarse) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCall(VecGetArray(dd->xc, &xa));
  PetscCall(VecGetArray(dd->yc, &ya));
  PetscCall(VecCreateSeqWithArray(PETSC_COMM_SELF, 1, dd->n0, xa, &xs));
  PetscCall(VecCreateSeqWithArray(PETSC_COMM_SELF, 1, dd->n0, ya, &ys));
  if (transpose) PetscCall(KSPSolveTranspose(dd->coarse, xs, ys));
  else PetscCall(KSPSolve(dd->coarse, xs, ys));
  PetscCall(VecDestroy(&xs));
  PetscCall(VecDestroy(&ys));
  PetscCall(VecRestoreArray(dd->xc, &xa));
  PetscCall(VecRestoreArray(dd->yc, &ya));
  PetscFunctionReturn(PETSC_SUCCESS);
}

/* y = M^{-1} x (or M^{-T} x): local part, then the coarse correction added. */
static PetscErrorCode DDLearnApply(PC pc, Vec x, Vec y, PetscBool transpose)
{
  PC_DDLearn *dd = (PC_DDLearn *)pc->data;

  PetscFunctionBegin;
  if (transpose) PetscCall(PCApplyTranspose(dd->local, x, y));
  else PetscCall(PCApply(dd->local, x, y));
  PetscCall(MatMultTranspose(dd->Phi, x, dd->xc));
  PetscCall(DDLearnCoarseSolve(dd, transpose));
  PetscCall(MatMultAdd(dd->Phi, dd->yc, y, y));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCApply_DDLearn(PC pc, Vec x, Vec y)
{
  PetscFunctionBegin;
  PetscCall(DDLearnApply(pc, x, y, PETSC_FALSE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCApplyTranspose_DDLearn(PC pc, Vec x, Vec y)
{
  PetscFunctionBegin;
  PetscCall(DDLearnApply(pc, x, y, PETSC_TRUE));
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCView_DDLearn(PC pc, PetscViewer viewer)
{
  PC_DDLearn *dd = (PC_DDLearn *)pc->data;
  PetscBool   ascii;
  PetscMPIInt size;

  PetscFunctionBegin;
  PetscCall(PetscObjectTypeCompare((PetscObject)viewer, PETSCVIEWERASCII, &ascii));
  if (!ascii) PetscFunctionReturn(PETSC_SUCCESS);
  PetscCallMPI(MPI_Comm_size(PetscObjectComm((PetscObject)pc), &size));
  PetscCall(PetscViewerASCIIPrintf(viewer, "  ddlearn learned two-level Schwarz from %s\n", dd->model[0] ? dd->model : "(no model)"));
  if (dd->local) {
    PetscCall(PetscViewerASCIIPrintf(viewer, "  N = %" PetscInt_FMT " subdomains (overlap %" PetscInt_FMT "), n_0 = %" PetscInt_FMT " learned coarse functions, local part %s, %d ranks\n", dd->N, dd->overlap, dd->n0, dd->mode == 0 ? "basic (SPD)" : "restrict (RAS)", size));
  }
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCSetFromOptions_DDLearn(PC pc, PetscOptionItems PetscOptionsObject)
{
  PC_DDLearn *dd = (PC_DDLearn *)pc->data;

  PetscFunctionBegin;
  PetscOptionsHeadBegin(PetscOptionsObject, "ddlearn learned two-level Schwarz options");
  PetscCall(PetscOptionsString("-ddlearn_model", "model file written by ddlearn.pc.export", "PCDDLEARN", dd->model, dd->model, sizeof(dd->model), NULL));
  PetscOptionsHeadEnd();
  PetscFunctionReturn(PETSC_SUCCESS);
}

static PetscErrorCode PCDestroy_DDLearn(PC pc)
{
  PetscFunctionBegin;
  PetscCall(PCReset_DDLearn(pc));
  PetscCall(PetscFree(pc->data));
  PetscFunctionReturn(PETSC_SUCCESS);
}

PETSC_EXTERN PetscErrorCode PCCreate_DDLearn(PC pc)
{
  PC_DDLearn *dd;

  PetscFunctionBegin;
  PetscCall(PetscNew(&dd));
  pc->data                 = (void *)dd;
  pc->ops->setup           = PCSetUp_DDLearn;
  pc->ops->apply           = PCApply_DDLearn;
  pc->ops->applytranspose  = PCApplyTranspose_DDLearn;
  pc->ops->view            = PCView_DDLearn;
  pc->ops->setfromoptions  = PCSetFromOptions_DDLearn;
  pc->ops->reset           = PCReset_DDLearn;
  pc->ops->destroy         = PCDestroy_DDLearn;
  PetscFunctionReturn(PETSC_SUCCESS);
}

PETSC_EXTERN PetscErrorCode PetscDLLibraryRegister_ddlearn_petsc(void)
{
  PetscFunctionBegin;
  PetscCall(PCRegister("ddlearn", PCCreate_DDLearn));
  PetscFunctionReturn(PETSC_SUCCESS);
}
