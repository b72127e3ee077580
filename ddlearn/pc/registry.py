"""The registry of coarse spaces: every family by name, classical and learned (the protocol:
:mod:`ddlearn.classical.coarse_space`). Adding a coarse space is its file plus one line here.

``-ddlearn_coarse_space hats+spectral`` composes families (:class:`Composite`); ``none`` is
one-level Schwarz.
"""
from __future__ import annotations

from ..classical.coarse.gdsw import GDSW
from ..classical.coarse.hats import Hats
from ..classical.coarse.nicolaides import Nicolaides
from ..classical.coarse.rgdsw import RGDSW
from ..classical.coarse.spectral import Spectral
from ..classical.coarse_space import Composite, CoarseSpace
from ..learned.coarse.learned import Learned
from ..learned.coarse.learned_insitu import LearnedInsitu

__all__ = ["COARSE_SPACES", "make_coarse_space"]

COARSE_SPACES: dict[str, type[CoarseSpace]] = {c.name: c for c in (
    Hats,
    Nicolaides,
    GDSW,
    RGDSW,
    Spectral,
    Learned,
    LearnedInsitu,
)}


def make_coarse_space(spec: str) -> CoarseSpace | None:
    """The coarse space named by ``spec`` (``name`` or ``name+name+...``; ``none``: ``None``).

    Raises
    ------
    ValueError
        Naming the unknown part and the choices.
    """
    if spec == "none":
        return None
    names = [s.strip() for s in spec.split("+")]
    unknown = [s for s in names if s not in COARSE_SPACES]
    if unknown or not names:
        raise ValueError(f"unknown -ddlearn_coarse_space {spec!r}; choose one of none, "
                         f"{', '.join(COARSE_SPACES)} or a sum such as hats+spectral")
    spaces = [COARSE_SPACES[s]() for s in names]
    return spaces[0] if len(spaces) == 1 else Composite(spaces)
