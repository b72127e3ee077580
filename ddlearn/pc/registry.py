"""The registry of coarse spaces: every family by name, classical and learned (the protocol:
:mod:`ddlearn.classical.coarse_space`). Adding a coarse space is its file plus one line: a
classical family in :data:`ddlearn.classical.coarse.FAMILIES` (the classical layer lists its
own), a learned one here.

A family is registered as ``"module:Class"`` and a learned family's module is imported the
first time the family is asked for (:func:`coarse_space_class`, through :func:`load`), so
importing :mod:`ddlearn.pc` and running a classical family never imports torch: only ``learned``,
``learned_insitu`` and ``schwarz_attention`` load :mod:`ddlearn.learned` (the ``learned`` extra).
:data:`COARSE_SPACE_NAMES` lists the families without importing a learned one (for messages and
docs).

``-ddlearn_coarse_space hats+spectral`` composes families (:class:`Composite`); ``none`` is
one-level Schwarz.
"""
from __future__ import annotations

import importlib

from ..classical.coarse import FAMILIES
from ..classical.coarse_space import Composite, CoarseSpace

__all__ = ["COARSE_SPACES", "COARSE_SPACE_NAMES", "coarse_space_class", "make_coarse_space",
           "load"]

COARSE_SPACES: dict[str, str] = {
    **{name: f"{c.__module__}:{c.__qualname__}" for name, c in FAMILIES.items()},
    "learned": "ddlearn.learned.coarse.learned:Learned",
    "learned_insitu": "ddlearn.learned.coarse.learned_insitu:LearnedInsitu",
    "schwarz_attention": "ddlearn.learned.coarse.schwarz_attention:SchwarzAttentionCoarse",
}
"""Family name -> ``"module:Class"`` of its :class:`~ddlearn.classical.coarse_space.CoarseSpace`."""

COARSE_SPACE_NAMES: tuple[str, ...] = tuple(COARSE_SPACES)
"""The families' names, in the registry's order; importing nothing."""


def load(target: str):
    """The object that ``target`` = ``"package.module:name"`` names, importing its module now
    (the package's one lazy import: a module is imported once, later calls find it loaded)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def coarse_space_class(name: str) -> type[CoarseSpace]:
    """The class of the family ``name`` (importing its module on first use).

    Raises
    ------
    KeyError
        When ``name`` is not a registered family (:data:`COARSE_SPACE_NAMES`).
    """
    return load(COARSE_SPACES[name])


def make_coarse_space(spec: str, option: str = "-ddlearn_coarse_space") -> CoarseSpace | None:
    """The coarse space named by ``spec`` (``name`` or ``name+name+...``; ``none``: ``None``).

    Parameters
    ----------
    spec
        The option's value.
    option
        The option's name as the user wrote it (with the PC's prefix), for the message.

    Raises
    ------
    ValueError
        Naming the option, the unknown part and the choices.
    """
    if spec == "none":
        return None
    names = [s.strip() for s in spec.split("+")]
    unknown = [s for s in names if s not in COARSE_SPACES]
    if unknown:
        raise ValueError(f"unknown {option} {spec!r}; choose one of none, "
                         f"{', '.join(COARSE_SPACE_NAMES)} or a sum such as hats+spectral")
    spaces = [coarse_space_class(s)() for s in names]
    return spaces[0] if len(spaces) == 1 else Composite(spaces)
