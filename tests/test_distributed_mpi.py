"""Distributed Schwarz attention on real MPI ranks against the serial module."""
import numpy as np
import pytest
import torch
from mpi4py import MPI
from petsc4py import PETSc

from conftest import raised_everywhere
from ddlearn.nn.operators import SchwarzAttention
from ddlearn.learned.operators.data import make_splits
from ddlearn.learned.operators.distributed import DistributedSchwarzAttention, PetscExactSolver
from ddlearn.decomposition.petsc_rows import RowLayout
from ddlearn.decomposition.problems import Poisson1D
from ddlearn.learned.operators.training import train
from ddlearn.nn.trainer import TrainConfig

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD

CONFIGS = [dict(grid=(63,), N=4, overlap=2, r_local=3),
           dict(grid=(100,), N=7, overlap=3, r_local=5, coarse=None),
           dict(grid=(12, 12), N=4, overlap=1, r_local=4, symmetric=True),
           dict(grid=(15, 13), N=6, overlap=2, r_local=2, coarse="nicolaides")]


def rows(d):
    return torch.from_numpy(d.layout.local_natural())


@pytest.mark.parametrize("cfg", CONFIGS)
def test_apply_parity_batched_and_vec(cfg):
    serial = SchwarzAttention(**cfg, seed=3, init_scale=1.0)
    d = DistributedSchwarzAttention(serial, coarse_rank=COMM.Get_size() - 1)
    F = torch.randn(7, serial.n, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = serial(F).detach()
    U = d(F[:, rows(d)]).detach()
    assert float((U - ref[:, rows(d)]).abs().max()) <= 1e-12 * float(ref.abs().max())
    x, y = d.layout.vec(), d.layout.vec()
    d.layout.from_natural(F[0].numpy(), x)
    d.apply(x, y)
    np.testing.assert_allclose(d.layout.to_natural(y), ref[0].numpy(), rtol=0,
                               atol=1e-12 * float(ref.abs().max()))
    assert d.num_parameters() == serial.num_parameters()
    x.destroy(), y.destroy(), d.destroy()


def test_gradients_match_serial():
    serial = SchwarzAttention((63,), 4, 2, 3, seed=0, init_scale=1.0)
    d = DistributedSchwarzAttention(serial)
    F = torch.randn(4, 63, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (serial(F) ** 2).sum().backward()
    local = (d(F[:, rows(d)]) ** 2).sum()
    from ddlearn.nn.comm import allreduce_sum
    allreduce_sum(local[None], COMM).sum().backward()
    loc = torch.from_numpy(d.layout.local_subdomains)
    # sums over ranks in another order: equal to round-off on the scale of the gradient
    # (an entry that cancels to near zero has no relative accuracy)
    q = serial.Q.grad[loc].numpy()
    np.testing.assert_allclose(d.Q.grad.numpy(), q, rtol=0, atol=1e-12 * np.abs(q).max())
    if d.layout.rank == d.layout.coarse_rank:
        k0 = serial.K0.grad.numpy()
        np.testing.assert_allclose(d.K0.grad.numpy(), k0, rtol=0, atol=1e-12 * np.abs(k0).max())
    d.destroy()


def test_training_parity_with_serial():
    p = Poisson1D(63)
    cfg = TrainConfig(steps=30, batch_size=16, lr=1e-2, eval_every=5, progress=False)
    serial = SchwarzAttention((63,), 4, 2, 3, seed=5)
    d = DistributedSchwarzAttention(serial)  # same initial parameters, sliced
    ser = train(serial, make_splits(p, 64, 16, 16, modes=16), cfg)
    A = RowLayout(serial.dec).matrix(p)
    solver = PetscExactSolver(A)
    local = make_splits(p, 64, 16, 16, modes=16, rows=d.layout.local_natural(), solve=solver)
    dist = train(d, local, cfg, comm=COMM)
    np.testing.assert_allclose(dist.history.train_loss, ser.history.train_loss, rtol=1e-10)
    np.testing.assert_allclose(dist.history.val_error, ser.history.val_error, rtol=1e-10)
    gathered = d.to_serial()
    if COMM.Get_rank() == 0:
        for a, b in zip(gathered.parameters(), serial.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-13)
    solver.destroy(), A.destroy(), d.destroy()


def test_checkpoint_loads_on_another_rank_count(tmp_path):
    path = COMM.bcast(str(tmp_path / "dist.pt"), root=0)
    serial = SchwarzAttention((63,), 4, 2, 3, seed=8, init_scale=1.0)
    d = DistributedSchwarzAttention(serial)
    d.save(path)
    F = torch.randn(3, 63, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    full = np.zeros((3, 63))
    full[:, d.layout.local_natural()] = d(F[:, rows(d)]).detach().numpy()
    full = COMM.allreduce(full, op=MPI.SUM)
    # one rank alone (a different rank count unless we run serially) ...
    alone = DistributedSchwarzAttention.load(path, comm=MPI.COMM_SELF, N=4, overlap=2)
    # the overlaps summed in another order: equal to round-off on the scale of the output
    scale = np.abs(full).max()
    np.testing.assert_allclose(alone(F).detach().numpy(), full, rtol=0, atol=1e-13 * scale)
    # ... and on the even ranks together
    sub = COMM.Split(COMM.Get_rank() % 2, COMM.Get_rank())
    part = DistributedSchwarzAttention.load(path, comm=PETSc.Comm(sub))
    U = part(F[:, rows(part)]).detach().numpy()
    np.testing.assert_allclose(U, full[:, part.layout.local_natural()], rtol=0,
                               atol=1e-13 * scale)
    for m in (d, alone, part):
        m.destroy()
    sub.Free()


def test_bad_inputs_raise_on_every_rank(tmp_path):
    size = COMM.Get_size()
    path = COMM.bcast(str(tmp_path / "bad.pt"), root=0)
    d = DistributedSchwarzAttention(SchwarzAttention((63,), 4, 2, 3))
    d.save(path)
    msgs = raised_everywhere(lambda: DistributedSchwarzAttention.load(path, N=8))
    assert all(m and "made for N 4, not 8" in m for m in msgs), msgs
    # a Vec laid out for another decomposition (one rank's local size is wrong)
    wrong = PETSc.Vec().createMPI((d.nlocal + (1 if d.layout.rank == 0 else 0), None), comm=PETSc.COMM_WORLD)
    y = d.layout.vec()
    msgs = raised_everywhere(lambda: d.apply(wrong, y))
    assert all(m and "do not match the operator's layout" in m for m in msgs), msgs
    msgs = raised_everywhere(lambda: d(torch.zeros(2, d.nlocal + 1, dtype=torch.float64)))
    assert all(m and "does not fit" in m for m in msgs), msgs
    msgs = raised_everywhere(lambda: d.save("/proc/no-such-dir/ckpt.pt"), exc=OSError)
    assert all(m and "could not write checkpoint" in m for m in msgs), msgs
    if size > 1:
        msgs = raised_everywhere(lambda: DistributedSchwarzAttention(
            SchwarzAttention((63,), size - 1, 2, 2)))
        assert all(m and "subdomains" in m for m in msgs), msgs
    wrong.destroy(), y.destroy(), d.destroy()


def test_bytes_per_apply_match_the_messages_and_not_n():
    counted = []
    for n in (255, 4095):
        d = DistributedSchwarzAttention(SchwarzAttention((n,), 8, 2, 2))
        with torch.no_grad():
            d(torch.ones(3, d.nlocal, dtype=torch.float64))
        # the bytes the point-to-point messages of all ranks carried
        logged = COMM.allreduce(d.bytes_sent(), op=MPI.SUM)
        assert d.bytes_per_apply(batch=3) == logged
        counted.append(d.bytes_per_apply())
        d.destroy()
    assert counted[0] == counted[1]
    assert (counted[0] == 0) == (COMM.Get_size() == 1)


def test_failed_distributed_write_keeps_previous_checkpoint(tmp_path):
    path = COMM.bcast(str(tmp_path / "keep.pt"), root=0)
    d = DistributedSchwarzAttention(SchwarzAttention((63,), 4, 2, 3, seed=4))
    d.save(path)
    before = d(torch.ones(1, d.nlocal, dtype=torch.float64)).detach()
    with torch.no_grad():
        d.Q.mul_(2.0)
    # torch.save fails half-way through pickling the unpicklable extra entry
    msgs = raised_everywhere(lambda: d.save(path, note=lambda: None), exc=OSError)
    assert all(m and "could not write checkpoint" in m for m in msgs), msgs
    again = DistributedSchwarzAttention.load(path)
    assert torch.equal(again(torch.ones(1, again.nlocal, dtype=torch.float64)).detach(), before)
    d.destroy(), again.destroy()
