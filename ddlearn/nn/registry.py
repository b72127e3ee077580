"""The token mixers and the operator-learning models by name: what a backbone, a checkpoint and
the benchmarks choose from.

A new mixer is its module (a :class:`~ddlearn.nn.mixer.TokenMixer` subclass) and one line in
:data:`MIXERS`; a new operator-learning model (an ``nn.Module`` with ``kind`` and ``config``,
:mod:`ddlearn.nn.operators`) is its class and one line in :data:`MODELS`; a baseline's network
in its authors' own configuration (an ``nn.Module`` whose ``config["network"]`` is its name, the
rest its constructor arguments) is its class and one line in :data:`NETWORKS`.
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
from .transolver_network import TransolverNetwork

__all__ = ["MIXERS", "mixer_class", "make_mixer", "MODELS", "NETWORKS"]

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

#: network name -> class: the baselines in their authors' own configuration (block, norms,
#: initialisation), beside the one-backbone swap of their mixers
NETWORKS: dict[str, type[nn.Module]] = {
    "transolver": TransolverNetwork,
}


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
