"""ddlearn: learned and classical two-level overlapping Schwarz preconditioners on PETSc.

Layers, imports pointing down only (checked by ``tests/test_layers.py``)::

    ddlearn.pc             PETSc PC front-ends, scipy operators, native export
    ddlearn.learned        learned operators, data, training, checkpoints
    ddlearn.classical      one-level Schwarz, coarse spaces, Galerkin coarse operator, Krylov runs
    ddlearn.decomposition  problems, subdomains, partitions, coarse-space geometry, layouts
"""
