"""The token mixers by name: what a backbone, a checkpoint and the benchmark choose from.

A new mixer is its module (a :class:`~ddlearn.nn.mixer.TokenMixer` subclass) and one line here.
"""
from __future__ import annotations

from .flare import FLAREMixer
from .flarepp import FLAREPlusPlusMixer
from .galerkin import GalerkinMixer
from .mixer import TokenMixer
from .physics import PhysicsAttentionMixer
from .schwarz import SchwarzMixer
from .softmax import SoftmaxMixer

__all__ = ["MIXERS", "mixer_class", "make_mixer"]

#: name -> class, in the study's order
MIXERS: dict[str, type[TokenMixer]] = {c.name: c for c in (
    SchwarzMixer,
    GalerkinMixer,
    SoftmaxMixer,
    FLAREMixer,
    FLAREPlusPlusMixer,
    PhysicsAttentionMixer,
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


def make_mixer(name: str, channels: int, heads: int = 4, layout=None, **options):
    """``mixer_class(name)(channels, heads, **options)`` with ``layout`` set where it needs
    one."""
    mixer = mixer_class(name)(channels, heads, **options)
    if mixer.needs_layout:
        mixer.set_layout(layout)
    return mixer
