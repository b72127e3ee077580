"""Layer 1 — classical overlapping Schwarz on PETSc: the one-level overlapping operator (PCASM
on given index sets), coarse spaces, the Galerkin coarse operator and their sum, the Krylov
runner with its symmetry rule, and serial scipy references.

Imports :mod:`ddlearn.decomposition` only.
"""
