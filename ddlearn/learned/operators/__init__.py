"""Operator learning: the global low-rank baseline ``Q Kᵀ``, Schwarz attention, FLARE/FLARE++,
their Fourier data, training with resume and checkpoints, data-aware initialisation, the
fair-comparison protocol, and the distributed Schwarz attention over PETSc scatters."""
