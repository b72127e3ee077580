"""Layer 3 — front-ends: petsc4py Python PCs selectable from options, a one-call Python API
(PETSc PC or scipy ``LinearOperator``), and the native export for C/C++/Fortran programs.

- :class:`TwoLevelSchwarzPC`: two-level Schwarz with a pluggable coarse space
  (``none``, ``hats``, ``nicolaides``, ``gdsw``, ``spectral``, ``learned``) on any matrix;
- :class:`SchwarzAttentionPC`: the paper-form Schwarz attention operator (modes ``attention``,
  ``additive``).
"""
from .attention import SchwarzAttentionPC
from .twolevel import TwoLevel, TwoLevelSchwarzPC, set_coordinates, two_level

__all__ = ["SchwarzAttentionPC", "TwoLevelSchwarzPC", "TwoLevel", "two_level", "set_coordinates"]
