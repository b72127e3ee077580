"""Schwarz attention distributed over ranks equals the serial mixer: forward output, input
gradients and (after the gradient allreduce) parameter gradients to 1e-12 in float64, for both
attentions, all levels and overlaps 0-2; the bytes it counts are the bytes its plan predicts, and
at a fixed subdomain size and a fixed number of subdomains per rank the largest ghost traffic of
a rank does not grow with the tokens.

Serial (P = 1) tests run as they are; the MPI tests with
``mpiexec -n P python -m mpi4py -m pytest --with-mpi -m mpi -q tests/test_nn_distributed_mpi.py``
for P = 2, 3, 4."""
import itertools

import numpy as np
import pytest
import torch
from mpi4py import MPI

from conftest import raised_everywhere
from ddlearn.decomposition.structured import assign_ranks
from ddlearn.nn.comm import allreduce_gradients, broadcast_parameters
from ddlearn.nn.distributed import DistributedSchwarzMixer
from ddlearn.nn.layout import TokenLayout
from ddlearn.nn.schwarz import SchwarzMixer

COMM = MPI.COMM_WORLD
CONFIGS = list(itertools.product(("softmax", "galerkin"), ("both", "local", "coarse"), (0, 1, 2)))


def grid(n: int, m: int | None = None) -> np.ndarray:
    m = m or n
    X, Y = np.meshgrid(np.arange(n) / n, np.arange(m) / m, indexing="ij")
    return np.stack([X.ravel(), Y.ravel()], axis=1)


def parity(comm, attention, levels, overlap, n=18, N=6, channels=8, heads=2, options=None,
           **build):
    """Max abs differences (output, input gradient, parameter gradients), max over ranks,
    between the serial mixer and its distributed twin on ``comm``, loss ``sum(y * w)``."""
    layout = TokenLayout.build(grid(n), subdomains=N, overlap=overlap, **build)
    torch.manual_seed(0)
    serial = SchwarzMixer(channels, heads, attention, levels, layout, **(options or {})).double()
    dist = DistributedSchwarzMixer.from_serial(serial, comm)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, n * n, channels, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(2, n * n, channels, dtype=torch.float64, generator=gen)
    y = serial(x)
    (y * w).sum().backward()
    x_own = dist.scatter(x.detach()).requires_grad_()
    y_own = dist(x_own)
    (y_own * dist.scatter(w)).sum().backward()
    allreduce_gradients(dist, comm)
    names = dict(serial.named_parameters())
    diffs = [(dist.gather(y_own.detach()) - y.detach()).abs().max().item(),
             (x_own.grad - dist.scatter(x.grad)).abs().max().item(),
             max((p.grad - names[k].grad).abs().max().item()
                 for k, p in dist.named_parameters())]
    diffs = np.array(diffs)
    comm.Allreduce(MPI.IN_PLACE, diffs, op=MPI.MAX)
    return diffs, dist, y


# -- serial -----------------------------------------------------------------------------------

@pytest.mark.parametrize("attention, levels, overlap", CONFIGS)
def test_one_rank_equals_the_serial_mixer(attention, levels, overlap):
    diffs, dist, _ = parity(MPI.COMM_SELF, attention, levels, overlap)
    assert diffs.max() < 1e-12, diffs
    assert dist.traffic["total"] == 0  # nothing to exchange


def test_same_state_dict_as_the_serial_mixer():
    layout = TokenLayout.build(grid(8), subdomains=4, overlap=1)
    serial = SchwarzMixer(8, 2, "galerkin", layout=layout)
    dist = DistributedSchwarzMixer(8, 2, "galerkin", layout=layout, comm=MPI.COMM_SELF)
    assert list(serial.state_dict()) == list(dist.state_dict())
    serial.load_state_dict(dist.state_dict())


def test_balanced_contiguous_blocks_and_plan():
    assert assign_ranks(10, 4).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    layout = TokenLayout.build(grid(12), subdomains=9, overlap=2)
    plans = [layout.rank_view(4, r) for r in range(4)]
    owned = np.concatenate([p["owned"] for p in plans])
    assert np.array_equal(np.sort(owned), np.arange(layout.tokens))  # one owner per token
    for r, p in enumerate(plans):
        assert not np.isin(p["ghosts"], p["owned"]).any()
        for s, rows in p["send"].items():  # what r sends s is what s receives from r
            got = plans[s]["ghosts"]
            start = sum(c for o, c in plans[s]["recv"].items() if o < r)
            assert np.array_equal(p["owned"][rows], got[start:start + plans[s]["recv"][r]])


def test_errors_name_the_fix():
    layout = TokenLayout.build(grid(8), subdomains=3, overlap=1)
    with pytest.raises(ValueError, match="more subdomains .* or run on fewer ranks"):
        layout.rank_view(4, 0)
    dist = DistributedSchwarzMixer(8, 2, layout=layout, comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="owned tokens"):
        dist(torch.zeros(1, 10, 8))
    with pytest.raises(ValueError, match="unknown ghosts"):
        DistributedSchwarzMixer(8, 2, ghosts="rows", comm=MPI.COMM_SELF)


def ghost_rows_max(n_sub: int, side: int, P: int, overlap: int = 1) -> int:
    """The largest number of ghost rows of a rank, ``P`` ranks, one box subdomain of
    ``side x side`` tokens per rank (``P`` a square): from the plan, no ranks needed."""
    k = int(round(np.sqrt(P)))
    layout = TokenLayout.build(grid(k * side), subdomains=n_sub, overlap=overlap)
    return max(len(layout.rank_view(P, r)["ghosts"]) for r in range(P))


def test_ghost_traffic_is_independent_of_the_tokens_at_fixed_subdomains_per_rank():
    """Weak scaling (8 x 8 tokens per subdomain, one subdomain per rank): once a rank has
    neighbours on all four sides (P >= 9), its ghost rows are the overlap around its subdomain,
    the same at 24², 32² and 64² tokens."""
    rows = [ghost_rows_max(P, 8, P) for P in (9, 16, 64)]
    assert rows[0] == rows[1] == rows[2] == 4 * 8


# -- MPI --------------------------------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("attention, levels, overlap", CONFIGS)
def test_distributed_equals_the_serial_mixer(attention, levels, overlap):
    diffs, dist, _ = parity(COMM, attention, levels, overlap)
    assert diffs.max() < 1e-12, diffs
    if levels != "coarse" and overlap:
        assert COMM.allreduce(dist.traffic["ghost"]) > 0


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("options", [{"combine": "sum"}, {"combine": "concat"},
                                     {"prolongation": "attention"},
                                     {"combine": "sum", "prolongation": "attention"},
                                     {"restricted": True}],
                         ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_distributed_equals_serial_for_every_combination(options):
    for attention in ("softmax", "galerkin"):
        diffs, _, _ = parity(COMM, attention, "both", 1, options=options)
        assert diffs.max() < 1e-12, (attention, diffs)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("build", [{"partitioner": "rcb"}, {"coarse": "hats"},
                                   {"partitioner": "metis"}])
def test_distributed_equals_serial_on_other_partitions(build):
    for attention in ("softmax", "galerkin"):
        diffs, _, _ = parity(COMM, attention, "both", 1, n=16, N=7 if "coarse" not in build
                             else 9, **build)
        assert diffs.max() < 1e-12, (attention, diffs)


@pytest.mark.mpi(min_size=2)
def test_counted_bytes_are_the_planned_bytes():
    """What a rank sends per forward: ghost rows x batch x channels (``ghosts='inputs'``; three
    times the channels with ``'qkv'``, same output), the same number of rows back (reverse),
    and the pooled ``[batch, n0, 3 channels]`` of the coarse allreduce."""
    B, C = 2, 8
    layout = TokenLayout.build(grid(16), subdomains=8, overlap=2)
    plans = [layout.rank_view(COMM.size, r) for r in range(COMM.size)]
    mine = plans[COMM.rank]
    sent = sum(len(v) for v in mine["send"].values())
    assert sent == sum(p["recv"].get(COMM.rank, 0) for p in plans)
    out = {}
    for ghosts in ("inputs", "qkv"):
        torch.manual_seed(0)
        dist = DistributedSchwarzMixer(C, 2, layout=layout, ghosts=ghosts,
                                       combine="sum").double()
        x = dist.scatter(torch.randn(B, layout.tokens, C, dtype=torch.float64,
                                     generator=torch.Generator().manual_seed(2)))
        out[ghosts] = dist(x)
        width = C if ghosts == "inputs" else 3 * C
        assert dist.traffic == {"ghost": sent * B * width * 8,
                                "reverse": len(mine["ghosts"]) * B * C * 8,
                                "allreduce": B * layout.n0 * 3 * C * 8,
                                "total": (sent * width + len(mine["ghosts"]) * C
                                          + layout.n0 * 3 * C) * B * 8}
    assert torch.allclose(out["inputs"], out["qkv"], rtol=0, atol=1e-13)


@pytest.mark.mpi(min_size=2)
def test_restricted_form_sends_nothing_back():
    """Restricted, every query is an owned row: the ghost rows go out, nothing comes back."""
    diffs, dist, _ = parity(COMM, "softmax", "both", 2, options={"restricted": True})
    assert diffs.max() < 1e-12, diffs
    assert dist.traffic["reverse"] == 0
    assert COMM.allreduce(dist.traffic["ghost"]) > 0


@pytest.mark.mpi(min_size=2)
def test_training_step_keeps_parameters_replicated():
    """broadcast + forward/backward + gradient allreduce + AdamW: every rank's parameters stay
    equal to the serial step's."""
    layout = TokenLayout.build(grid(12), subdomains=4 * COMM.size, overlap=1)
    torch.manual_seed(COMM.rank)  # different on every rank until the broadcast
    dist = DistributedSchwarzMixer(8, 2, "galerkin", layout=layout).double()
    broadcast_parameters(dist)
    serial = SchwarzMixer(8, 2, "galerkin", layout=layout).double()
    serial.load_state_dict(dist.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (serial, dist)]
    x = torch.randn(3, layout.tokens, 8, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(5))
    for _ in range(3):
        for o in opts:
            o.zero_grad()
        (serial(x) ** 2).mean().backward()
        (dist(dist.scatter(x)) ** 2).sum().div(x.numel()).backward()
        allreduce_gradients(dist)
        for o in opts:
            o.step()
    for k, p in dist.named_parameters():
        assert torch.allclose(p, dict(serial.named_parameters())[k], rtol=0, atol=1e-12), k


@pytest.mark.mpi(min_size=2)
def test_too_few_subdomains_raises_on_every_rank():
    layout = TokenLayout.build(grid(8), subdomains=COMM.size - 1, overlap=1)
    msgs = raised_everywhere(lambda: DistributedSchwarzMixer(8, 2, layout=layout))
    assert all(m and "more subdomains" in m and "fewer ranks" in m for m in msgs), msgs
