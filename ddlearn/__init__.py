"""ddlearn: learned and classical two-level overlapping Schwarz preconditioners on PETSc.

Layers, imports pointing down only (checked by ``tests/test_layers.py``)::

    ddlearn.harness        the comparison harness of the benchmarks (never imported below)
    ddlearn.pc             PETSc PC front-ends, scipy operators, native export
    ddlearn.learned        learned operators, data, training, checkpoints (torch)
    ddlearn.classical      one-level Schwarz, coarse spaces, Galerkin coarse operator, Krylov runs
    ddlearn.decomposition  problems, subdomains, partitions, coarse-space geometry, layouts

The classical path (``import ddlearn.pc`` and a classical coarse space) needs numpy, scipy,
mpi4py, petsc4py, slepc4py and pymetis only; torch and tqdm come with the ``learned`` extra and
are imported when a learned family or :class:`ddlearn.pc.SchwarzAttentionPC` is asked for;
matplotlib comes with the ``bench`` extra (``pip install ddlearn[all]`` installs everything).
"""
