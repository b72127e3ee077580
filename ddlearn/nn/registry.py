"""The token mixers and the operator-learning models by name: what a backbone, a checkpoint and
the benchmarks choose from.

A new mixer is its module (a :class:`~ddlearn.nn.mixer.TokenMixer` subclass) and one line in
:data:`MIXERS`; a new operator-learning model (an ``nn.Module`` with ``kind`` and ``config``,
:mod:`ddlearn.nn.operators`) is its class and one line in :data:`MODELS`.
"""
from __future__ import annotations

from torch import nn

from .flare import FLAREMixer
from .flarepp import FLAREPlusPlusMixer
from .galerkin import GalerkinMixer
from .mixer import TokenMixer
from .operators import FLARE, FLAREPlusPlus, GlobalAttention, SchwarzAttention
from .physics import PhysicsAttentionMixer
from .schwarz import SchwarzMixer
from .softmax import SoftmaxMixer

__all__ = ["MIXERS", "mixer_class", "make_mixer", "MODELS"]

#: name -> class, in the study's order
MIXERS: dict[str, type[TokenMixer]] = {c.name: c for c in (
    SchwarzMixer,
    GalerkinMixer,
    SoftmaxMixer,
    FLAREMixer,
    FLAREPlusPlusMixer,
    PhysicsAttentionMixer,
)}

#: operator-learning model ``kind`` -> class: what a checkpoint can rebuild and what the study
#: compares, in the study's order
MODELS: dict[str, type[nn.Module]] = {c.kind: c for c in (
    SchwarzAttention,
    GlobalAttention,
    FLARE,
    FLAREPlusPlus,
)}


def mixer_class(name: str):
    """The class registered as ``name``.

    Raises
    ------
    ValueError
        For a name not in :data:`MIXERS`.
    """
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}: use one of {sorted(MIXERS)}")
    return MIXERS[name]


def make_mixer(name: str, channels: int, heads: int = 4, layout=None, dim: int | None = None,
               **options):
    """``mixer_class(name)(channels, heads, **options)`` with ``layout`` set where it needs
    one, and the coordinate dimension ``dim`` (where given) passed as its option ``dim`` where
    it reads the coordinates (:attr:`~ddlearn.nn.mixer.TokenMixer.needs_points`)."""
    cls = mixer_class(name)
    if cls.needs_points and dim is not None:
        options = {**options, "dim": dim}
    mixer = cls(channels, heads, **options)
    if mixer.needs_layout:
        mixer.set_layout(layout)
    return mixer
