"""Operator-learning datasets (grids and the mesh set) on 2 ranks: the same content (SHA-256) as
on one rank, and bad
options refused on every rank with nothing written."""
import os

import pytest
from mpi4py import MPI

from conftest import raised_everywhere
from ddlearn.harness import datasets, mesh_darcy
from ddlearn.nn.data import load_dataset

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
def test_same_content_hash_on_one_and_on_all_ranks(tmp_path):
    root = COMM.bcast(str(tmp_path), root=0)
    for family, dim, kw in (("darcy", 2, {"fine": 17, "resolutions": "17,9"}),
                            ("inclusions", 3, {"fine": 8, "contrast": 1e4})):
        opts = datasets.options(family, dim, train=3, test=2, seed=5, **kw)
        paths = datasets.generate(opts, os.path.join(root, "all"), COMM, progress=False)
        serial = None
        if COMM.Get_rank() == 0:
            serial = datasets.generate(opts, os.path.join(root, "one"), MPI.COMM_SELF,
                                       progress=False)
        serial = COMM.bcast(serial, root=0)
        for p, q in zip(paths, serial):
            if COMM.Get_rank() == 0:
                a, b = load_dataset(p), load_dataset(q)
                assert a.record["sha256"] == b.record["sha256"]
                assert a.record["provenance"]["ranks"] == COMM.Get_size()
                assert b.record["provenance"]["ranks"] == 1
        COMM.Barrier()
    opts = mesh_darcy.options(h=0.0625, train=3, test=2, seed=5)
    path = mesh_darcy.generate(opts, os.path.join(root, "mesh-all"), COMM, progress=False)
    if COMM.Get_rank() == 0:
        serial = mesh_darcy.generate(opts, os.path.join(root, "mesh-one"), MPI.COMM_SELF,
                                     progress=False)
        assert load_dataset(path).record["sha256"] == load_dataset(serial).record["sha256"]
    COMM.Barrier()


@pytest.mark.mpi(min_size=2)
def test_bad_options_raise_on_every_rank_and_nothing_is_written(tmp_path):
    out = os.path.join(COMM.bcast(str(tmp_path), root=0), "out")
    messages = raised_everywhere(lambda: datasets.ensure_dataset(
        "channels", 2, 7, out, COMM, fine=50, contrast=1e3))
    assert all(m and "--resolutions" in m and "not reachable from --fine 50" in m
               for m in messages), messages
    assert not os.path.exists(out)
