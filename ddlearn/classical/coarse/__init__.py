"""The classical coarse spaces, one file per family (the protocol:
:mod:`ddlearn.classical.coarse_space`), listed once in :data:`FAMILIES`; the registry of every
family, learned ones included, is :mod:`ddlearn.pc.registry`.

:func:`grid_basis` gives a family's :math:`\\Phi` on a structured grid decomposition (what
the structured learned operators and their checkpoints name by ``coarse``).
"""
import scipy.sparse as sp

from ..coarse_space import CoarseSpace
from .gdsw import GDSW
from .harmonic import Harmonic
from .hats import Hats
from .nicolaides import Nicolaides
from .rgdsw import RGDSW
from .spectral import Spectral

__all__ = ["FAMILIES", "grid_basis"]

#: the classical coarse-space families by name
FAMILIES: dict[str, type[CoarseSpace]] = {c.name: c for c in (
    Hats,
    Nicolaides,
    GDSW,
    RGDSW,
    Harmonic,
    Spectral,
)}


def grid_basis(name: str, dec) -> sp.csr_matrix:
    """:math:`\\Phi` of the classical family ``name`` on the structured decomposition ``dec``
    (:meth:`~ddlearn.classical.coarse_space.CoarseSpace.on_grid`; zeros dropped).

    Raises
    ------
    ValueError
        For a name that is no classical family, a family without a grid form, or an empty
        basis; the message names the families that have one.
    """
    on_grid = [n for n, c in FAMILIES.items()
               if c.on_grid.__func__ is not CoarseSpace.on_grid.__func__]
    try:
        Phi = FAMILIES[name].on_grid(dec)
    except KeyError:
        raise ValueError(f"unknown coarse space {name!r} on a structured grid decomposition; "
                         f"choose one of {', '.join(on_grid)}") from None
    except ValueError as e:
        raise ValueError(f"{e} (on a structured grid: {', '.join(on_grid)})") from None
    Phi.eliminate_zeros()
    return Phi
