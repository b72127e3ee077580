"""Shared helpers for serial and MPI (pytest-mpi) tests."""
import os
import tempfile

import numpy as np
import pytest
import torch
from mpi4py import MPI

# One thread per rank: ranks already share two cores.
torch.set_num_threads(1)


def pytest_configure(config):
    # Ranks must not clean up each other's temporary directories.
    comm = MPI.COMM_WORLD
    if comm.Get_size() > 1 and not config.option.basetemp:
        config.option.basetemp = os.path.join(
            tempfile.gettempdir(), f"ddlearn-pytest-{os.getuid()}-{comm.Get_size()}-{comm.Get_rank()}")


def raised_everywhere(fn, exc=ValueError):
    """Call ``fn`` on every rank; return the messages of the ``exc`` each rank raised, gathered
    on all ranks. A rank that did not raise contributes ``None``; reaching the allgather proves
    no rank is stuck in a collective."""
    try:
        fn()
        msg = None
    except exc as e:
        # petsc4py reports an exception raised inside a Python PC as a PETSc.Error whose
        # cause/context carries the original message: keep the whole chain.
        parts, err = [], e
        while err is not None:
            parts.append(str(err))
            err = err.__cause__ or err.__context__
        msg = " <- ".join(parts)
    return MPI.COMM_WORLD.allgather(msg)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
