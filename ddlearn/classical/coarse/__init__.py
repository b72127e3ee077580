"""The classical coarse spaces, one file per family (the protocol:
:mod:`ddlearn.classical.coarse_space`), listed once in :data:`FAMILIES`; the registry of every
family, learned ones included, is :mod:`ddlearn.pc.registry`.

The bases of a structured grid decomposition (hats, Nicolaides; what the paper-form operators
and their checkpoints name by ``coarse``) are :func:`ddlearn.decomposition.coarse.grid_basis`.
"""
from ..coarse_space import CoarseSpace
from .gdsw import GDSW
from .harmonic import Harmonic
from .hats import Hats
from .nicolaides import Nicolaides
from .rgdsw import RGDSW
from .spectral import Spectral

__all__ = ["FAMILIES"]

#: the classical coarse-space families by name
FAMILIES: dict[str, type[CoarseSpace]] = {c.name: c for c in (
    Hats,
    Nicolaides,
    GDSW,
    RGDSW,
    Harmonic,
    Spectral,
)}
