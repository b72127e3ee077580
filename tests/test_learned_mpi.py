"""The learned preconditioner on 1-4 ranks: selected through PETSc options, equal to the serial
scipy adapter, SPD, trained identically on any rank count, never worse than classical."""
import numpy as np
import pytest
from mpi4py import MPI
from petsc4py import PETSc

from conftest import (apply_gathered, pc_from_options, raised_everywhere, solve_with_pc_options,
                      view_text)
from ddlearn.decomposition.coarse import grid_basis
from ddlearn.decomposition import Decomposition
from ddlearn.nn.operators import SchwarzAttention
from ddlearn.learned.operators.distributed import DistributedSchwarzAttention
from ddlearn.decomposition.petsc_rows import RowLayout
from ddlearn.learned.coarse.basis import (aslinearoperator, basis_correction_model, distributed_basis,
                                   gather_smoothing, learned_meta, perturb_)
from ddlearn.learned.coarse.pc_training import (PCTrainConfig, held_out_iterations, held_out_rhs,
                                         train_preconditioner)
from ddlearn.decomposition.problems import make_problem
from ddlearn.learned.coarse.model_file import load_model
from ddlearn.learned.coarse.local_training import LocalTrainConfig, train_local_coarse

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"


OMEGA = lambda N: np.linspace(-0.3, 0.9, N)  # noqa: E731  smoothing weights away from 0


def _perturbed(dec, scale=0.2):
    """A serial basis correction away from the classical start, the same on every rank."""
    S = basis_correction_model(dec, r_local=3, seed=1)
    perturb_(S, scale, 5)
    return S


def _save(tmp_path, name, S, problem, coarse="hats"):
    path = COMM.bcast(str(tmp_path / name), root=0)
    d = DistributedSchwarzAttention(S)
    A = d.layout.matrix(problem)
    d.save(path, **learned_meta(coarse, OMEGA(S.dec.N), d.layout, A,
                                problem=problem.describe()))
    A.destroy()
    d.destroy()
    return path



def _insitu(path) -> dict:
    """The PC options selecting the in-situ learned coarse space of checkpoint ``path``."""
    return {"coarse_space": "learned_insitu", "learned_insitu_model": path}

@pytest.mark.parametrize("name,n,N,overlap", [("poisson1d", 255, 8, 2), ("poisson2d", 23, 9, 1)])
def test_learned_pc_from_options(tmp_path, name, n, N, overlap):
    p = make_problem(name, n)
    S = _perturbed(Decomposition(p.grid, N, overlap))
    path = _save(tmp_path, f"learned-{name}.pt", S, p)
    layout = RowLayout(S.dec)
    A = layout.matrix(p)
    xs = np.random.default_rng(0).uniform(-1, 1, p.n)
    b = layout.from_natural(xs)
    res = solve_with_pc_options(A, b, "lrn_", pc=PC, **_insitu(path))
    assert res.converged and res.rnorm_true < 1e-8, res
    res_r = solve_with_pc_options(A, b, "lrr_", ksp="gmres", pc=PC, **_insitu(path),
                                  local_type="restrict")
    assert res_r.converged and res_r.rnorm_true < 1e-8, res_r
    # the PC's apply equals the serial scipy adapter; symmetric and positive in CG mode
    for mode, local in (("learned", "basic"), ("learned_restricted", "restrict")):
        pc = pc_from_options(A, "lap_", pc=PC, **_insitu(path), local_type=local)
        ys = np.random.default_rng(1).standard_normal(p.n)
        X, Y, MX, MY = b, layout.from_natural(ys), layout.vec(), layout.vec()
        pc.apply(X, MX), pc.apply(Y, MY)
        ref = aslinearoperator(S, p, mode=mode, omega=OMEGA(N)) @ xs
        np.testing.assert_allclose(layout.to_natural(MX), ref, rtol=0,
                                   atol=1e-12 * np.abs(ref).max())
        if mode == "learned":
            # symmetric up to round-off, measured on the scale of the products' factors
            # (<Mx, y> itself may cancel)
            assert abs(MX.dot(Y) - X.dot(MY)) <= 1e-12 * MX.norm() * Y.norm()
            assert MX.dot(X) > 0 and MY.dot(Y) > 0
        for o in (pc, Y, MX, MY):
            o.destroy()
    A.destroy(), b.destroy()


def test_training_is_rank_count_independent_and_keeps_best_state():
    p = make_problem("poisson2d", 31)
    dec = Decomposition(p.grid, 16, 1)
    Phi = grid_basis("hats", dec)
    cfg = PCTrainConfig(steps=6, lr=3e-2, batch=4, eval_every=2, progress=False)
    runs = {}
    for label, comm in (("world", PETSc.COMM_WORLD), ("self", PETSc.COMM_SELF)):
        S = DistributedSchwarzAttention(basis_correction_model(dec, 4), comm)
        layout = S.layout
        A = layout.matrix(p)
        basis = distributed_basis(S, layout, A, Phi)
        res = train_preconditioner(basis, layout, A, cfg)
        rhs = held_out_rhs(layout, cfg.eval_rhs, cfg.seed)
        final = float(np.mean(held_out_iterations(basis, layout, A, rhs)))
        runs[label + "_omega"] = gather_smoothing(basis, layout)
        runs[label] = (res, final)
        for o in (A, *rhs):
            o.destroy()
        S.destroy()
    (world, final_w), (alone, final_s) = runs["world"], runs["self"]
    np.testing.assert_allclose(world.history["loss"][1:], alone.history["loss"][1:], rtol=1e-10)
    # the same preconditioners to round-off (losses and weights above): CG converges alike on
    # any rank count, the last iteration on either side of the tolerance
    assert len(world.history["iterations"]) == len(alone.history["iterations"])
    assert np.abs(np.subtract(world.history["iterations"],
                              alone.history["iterations"])).max() <= 1, (world, alone)
    assert abs(final_w - final_s) <= 1, (final_w, final_s)
    np.testing.assert_allclose(runs["world_omega"], runs["self_omega"], rtol=1e-10)
    # best-state rule: what is kept, measured again on the same ranks, is the best measured
    # state (the same computation again: equal by construction)
    assert final_w == world.best_iterations == min(world.history["iterations"])
    assert final_s == alone.best_iterations == min(alone.history["iterations"])
    assert world.history["step"][world.history["iterations"].index(world.best_iterations)] \
        == world.best_step


@pytest.mark.mpi(min_size=2)
def test_local_coarse_training_is_rank_count_independent(tmp_path):
    """The offline training of the learned local coarse space on all ranks and on one rank
    (every rank alone, a communicator of size 1) trains on the same fields every step: the
    same losses and parameters up to round-off."""
    cfg = LocalTrainConfig(families=("channels", "lognormal"), fields_per_family=2,
                           validation_per_family=1, fields_per_step=4, n=31, N=4, k=3,
                           vectors=3, hidden=6, layers=1, iterations=8, eval_every=2, lr=1e-2)
    base = COMM.bcast(str(tmp_path), root=0)
    world_comm, alone_comm = COMM.Clone(), COMM.Split(COMM.rank, 0)
    world = train_local_coarse(cfg, f"{base}/world.pt", world_comm, progress=False)
    alone = train_local_coarse(cfg, f"{base}/alone{COMM.rank}.pt", alone_comm, progress=False)
    assert world["ranks"] == COMM.size and alone["ranks"] == 1
    assert world["fields"] == alone["fields"] == 4
    for key in ("train_loss", "validation"):
        np.testing.assert_allclose([h[key] for h in world["history"]],
                                   [h[key] for h in alone["history"]], rtol=1e-8)
    assert world["best_step"] == alone["best_step"]
    np.testing.assert_allclose(world["best_validation"], alone["best_validation"], rtol=1e-8)
    COMM.Barrier()
    a, _, _ = load_model(f"{base}/world.pt")
    b, _, _ = load_model(f"{base}/alone{COMM.rank}.pt")
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-8, atol=1e-12)
    world_comm.Free(), alone_comm.Free()


def test_best_state_rule_survives_a_destructive_learning_rate():
    p = make_problem("poisson1d", 255)
    dec = Decomposition(p.grid, 8, 2)
    S = DistributedSchwarzAttention(basis_correction_model(dec, 4))
    A = S.layout.matrix(p)
    basis = distributed_basis(S, S.layout, A, grid_basis("hats", dec))
    res = train_preconditioner(basis, S.layout, A, PCTrainConfig(
        steps=4, lr=10.0, lr_smoothing=5.0, batch=2, eval_every=1, progress=False))
    assert max(res.history["iterations"]) > res.initial_iterations or res.stopped != "steps"
    rhs = held_out_rhs(S.layout, 2, 0)
    assert np.mean(held_out_iterations(basis, S.layout, A, rhs)) == res.best_iterations \
        <= res.initial_iterations
    for o in (A, *rhs):
        o.destroy()
    S.destroy()


def test_learned_pc_bad_inputs_on_every_rank(tmp_path):
    p = make_problem("poisson1d", 63)
    dec = Decomposition(p.grid, 4, 2)
    path = _save(tmp_path, "good.pt", _perturbed(dec), p)
    corrupt = COMM.bcast(str(tmp_path / "corrupt.pt"), root=0)
    if COMM.Get_rank() == 0:
        open(corrupt, "wb").write(b"not a checkpoint")
    COMM.Barrier()
    other = make_problem("poisson1d", 127)
    A_other = RowLayout(Decomposition(other.grid, 4, 2)).matrix(other)
    A = RowLayout(dec).matrix(p)
    b, b_other = A.createVecLeft(), A_other.createVecLeft()
    b.set(1.0), b_other.set(1.0)
    # same grid and decomposition, other coefficients: same layout, refused by the fingerprint
    p2 = make_problem("poisson2d", 15)
    dec2 = Decomposition(p2.grid, 4, 1)
    path2 = _save(tmp_path, "poisson.pt", _perturbed(dec2), p2)
    A_ch = RowLayout(dec2).matrix(make_problem("channels", 15))
    b_ch = A_ch.createVecLeft()
    b_ch.set(1.0)
    # a paper-form operator (no learned coarse-space metadata) given as the checkpoint
    paper = COMM.bcast(str(tmp_path / "paper.pt"), root=0)
    operator = DistributedSchwarzAttention(SchwarzAttention(p.grid, 4, 2, 2))
    operator.save(paper)
    operator.destroy()
    cases = [
        (lambda: solve_with_pc_options(A_ch, b_ch, "b0_", pc=PC, **_insitu(path2)),
         "is not the one this learned coarse space"),
        (lambda: solve_with_pc_options(A_other, b_other, "b1_", pc=PC, **_insitu(path)),
         "the matrix has 127 rows but the model was trained for 63"),
        (lambda: solve_with_pc_options(A, b, "b2_", pc=PC, **_insitu(corrupt)),
         "not a readable ddlearn checkpoint"),
        (lambda: solve_with_pc_options(A, b, "b3_", pc=PC,
                                       **_insitu(str(tmp_path / "none.pt"))),
         "none.pt: give -b3_ddlearn_learned_insitu_model FILE"),
        (lambda: solve_with_pc_options(A, b, "b4_", pc=PC, **_insitu(path),
                                       local_type="restrict"),
         "is not symmetric, so CG does not apply"),
        (lambda: solve_with_pc_options(A, b, "b5_", model=path, ksp="gmres", mode="attention"),
         "is a learned coarse space, not a paper-form operator"),
        (lambda: solve_with_pc_options(A, b, "b7_", pc=PC, **_insitu(paper)),
         "a learned coarse space: use -b7_pc_python_type ddlearn.pc.SchwarzAttentionPC"),
        (lambda: solve_with_pc_options(A, b, "b6_", pc=PC, coarse_space="learned_insitu"),
         "-b6_ddlearn_coarse_space learned_insitu needs its checkpoint: give "
         "-b6_ddlearn_learned_insitu_model FILE"),
    ]
    for run, expected in cases:
        msgs = raised_everywhere(run, exc=Exception)
        assert all(m and expected in m for m in msgs), (expected, msgs)
    for o in (A, A_other, b, b_other, A_ch, b_ch):
        o.destroy()


def test_learned_pc_view(tmp_path):
    p = make_problem("poisson2d", 15)
    dec = Decomposition(p.grid, 4, 1)
    path = _save(tmp_path, "view.pt", _perturbed(dec), p)
    A = RowLayout(dec).matrix(p)
    pc = pc_from_options(A, "view_", pc=PC, **_insitu(path))
    out = view_text(pc, tmp_path / "view.txt")
    for text in ("coarse space learned", "N = 4 subdomains", "n_0 = 1 ", "untrained",
                 "PC Object: (view_ddlearn_local_)", "type: asm", "KSP Object: (view_ddlearn_coarse_)"):
        assert text in out, (text, out)
    pc.destroy(), A.destroy()


def test_learned_coarse_space_in_natural_ordering(tmp_path):
    """A learned checkpoint serves the matrix in the grid's natural numbering with PETSc's
    default row distribution: same operator as in ddlearn's numbering, up to the permutation."""
    p = make_problem("poisson2d", 23)
    dec = Decomposition(p.grid, 9, 1)
    path = _save(tmp_path, "natural.pt", _perturbed(dec), p)
    layout = RowLayout(dec)
    A_dd = layout.matrix(p)
    rows = p.matrix()
    A_nat = PETSc.Mat().createAIJ((p.n, p.n), comm=PETSc.COMM_WORLD)
    A_nat.setUp()
    lo, hi = A_nat.getOwnershipRange()
    local = rows[lo:hi]
    A_nat.setPreallocationCSR((local.indptr, local.indices, local.data))
    A_nat.assemble()
    x = np.random.default_rng(3).standard_normal(p.n)
    pcs = [pc_from_options(A_dd, "dd_", pc=PC, **_insitu(path)),
           pc_from_options(A_nat, "nat_", pc=PC, **_insitu(path))]
    X, Y = layout.from_natural(x), layout.vec()
    pcs[0].apply(X, Y)
    y_dd = layout.to_natural(Y)
    y_nat = apply_gathered(pcs[1], A_nat, x)
    np.testing.assert_allclose(y_nat, y_dd, rtol=0, atol=1e-12 * np.abs(y_dd).max())
    for o in (*pcs, X, Y, A_dd, A_nat):
        o.destroy()
