"""Work dealt out to the ranks in rounds and work on rank 0 (ddlearn.decomposition.collective):
results in order on rank 0 whatever the rank count, and an error in any item or on rank 0
raised on every rank (reaching the allgather of raised_everywhere proves no rank hangs)."""
import pytest
from mpi4py import MPI

from conftest import raised_everywhere
from ddlearn.decomposition.collective import dealt_out, on_root

COMM = MPI.COMM_WORLD


def _square_on_its_rank(job):
    k, maker = job
    return k * k, maker, COMM.Get_rank()


@pytest.mark.mpi(min_size=1)
def test_results_in_order_from_every_rank():
    count = 2 * COMM.Get_size() + 1  # the last round leaves ranks idle
    out = dealt_out(COMM, count, lambda k: (k, COMM.Get_rank()), _square_on_its_rank)
    nothing = dealt_out(COMM, 0, None, None)
    if COMM.Get_rank() != 0:
        assert out is None and nothing is None
        return
    assert [r[0] for r in out] == [k * k for k in range(count)]
    assert {r[1] for r in out} == {0}  # rank 0 made every item
    assert {r[2] for r in out} == set(range(COMM.Get_size()))  # every rank worked
    assert nothing == []


@pytest.mark.mpi(min_size=1)
def test_an_item_error_is_raised_on_every_rank():
    def work(k):
        if k == 3:
            raise RuntimeError("item 3 cannot be solved")
        return k

    messages = raised_everywhere(lambda: dealt_out(COMM, 5, lambda k: k, work))
    assert all(m is not None and "item 3 cannot be solved" in m for m in messages), messages


@pytest.mark.mpi(min_size=1)
def test_an_error_on_rank0_is_raised_on_every_rank():
    def fail():
        raise ValueError("rank 0 found no interface")

    messages = raised_everywhere(lambda: on_root(COMM, fail))
    assert all(m is not None and "no interface" in m for m in messages), messages
    assert on_root(COMM, lambda: 7) == (7 if COMM.Get_rank() == 0 else None)
