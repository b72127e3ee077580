"""Layer 3 — front-ends: petsc4py Python PCs selectable from options, a one-call Python API
(PETSc PC or scipy ``LinearOperator``), and the native export for C/C++/Fortran programs.

- :class:`TwoLevelSchwarzPC`: two-level Schwarz with a pluggable coarse space (the registry,
  :mod:`ddlearn.pc.registry`: ``hats``, ``nicolaides``, ``gdsw``, ``rgdsw``, ``spectral``,
  ``learned``, ``learned_insitu`` and sums of them) on any matrix, with what users hand a DD
  preconditioner (:func:`set_coordinates`, :func:`set_subdomains`,
  :func:`set_auxiliary_matrices`, the matrix's block size and near-null space);
- :class:`SchwarzAttentionPC`: the paper-form Schwarz attention operator (modes ``attention``,
  ``additive``).
"""
from ..classical.krylov import check_symmetric_pc
from .attention import SchwarzAttentionPC
from .registry import COARSE_SPACES, make_coarse_space
from .inputs import set_auxiliary_matrices, set_coordinates, set_subdomains
from .twolevel import TwoLevel, TwoLevelSchwarzPC, two_level

__all__ = ["SchwarzAttentionPC", "TwoLevelSchwarzPC", "TwoLevel", "two_level", "set_coordinates",
           "set_subdomains", "set_auxiliary_matrices", "check_symmetric_pc", "COARSE_SPACES",
           "make_coarse_space"]
