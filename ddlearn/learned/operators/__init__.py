"""Operator learning around the models of :mod:`ddlearn.nn.operators` (the global low-rank
baseline ``Q Kᵀ``, Schwarz attention, FLARE/FLARE++): their Fourier data, training with resume and
checkpoints, data-aware initialisation, the fair-comparison protocol, and the distributed Schwarz
attention with its PETSc side (batched PETSc applies, the exact solver of the targets)."""
