"""Layer 3 — front-ends: petsc4py Python PCs selectable from options, a one-call Python API
(PETSc PC or scipy ``LinearOperator``), and the native export for C/C++/Fortran programs.

- :class:`TwoLevelSchwarzPC`: two-level Schwarz with a pluggable coarse space (the registry,
  :mod:`ddlearn.pc.registry`: :data:`~ddlearn.pc.registry.COARSE_SPACE_NAMES` and sums of them)
  on any matrix, with what users hand a DD preconditioner (:func:`set_coordinates`,
  :func:`set_subdomains`, :func:`set_auxiliary_matrices`, the matrix's block size and near-null
  space);
- :class:`SchwarzAttentionPC`: the paper-form Schwarz attention operator (modes ``attention``,
  ``additive``).

Importing this package loads no torch: the learned coarse-space families are imported when a
coarse space names them, and ``SchwarzAttentionPC`` (a torch model) on first access
(``ddlearn.pc.SchwarzAttentionPC``, ``-pc_python_type ddlearn.pc.SchwarzAttentionPC``).
"""
from ..classical.krylov import check_symmetric_pc
from .registry import COARSE_SPACE_NAMES, COARSE_SPACES, coarse_space_class, load, make_coarse_space
from .inputs import set_auxiliary_matrices, set_coordinates, set_subdomains
from .twolevel import TwoLevel, TwoLevelSchwarzPC, two_level

__all__ = ["TwoLevelSchwarzPC", "TwoLevel", "two_level", "set_coordinates", "set_subdomains",
           "set_auxiliary_matrices", "check_symmetric_pc", "COARSE_SPACES", "COARSE_SPACE_NAMES",
           "coarse_space_class", "make_coarse_space"]

LAZY: dict[str, str] = {"SchwarzAttentionPC": "ddlearn.pc.attention:SchwarzAttentionPC"}
"""Attributes imported on first access (they need the ``learned`` extra), name -> ``"module:name"``;
left out of ``__all__`` so that ``from ddlearn.pc import *`` stays classical."""


def __getattr__(name: str):
    """``ddlearn.pc.<name>`` for the :data:`LAZY` attributes, imported now (PEP 562)."""
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return load(LAZY[name])


def __dir__() -> list[str]:
    return sorted([*globals(), *LAZY])
