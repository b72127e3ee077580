"""The token mixers, the operator-learning models and the baselines' own networks by name: what
a backbone, a checkpoint and the benchmarks choose from.

A new mixer is its module (a :class:`~ddlearn.nn.mixer.TokenMixer` subclass) and one line in
:data:`MIXERS`; a new operator-learning model (an ``nn.Module`` with ``kind`` and ``config``,
:mod:`ddlearn.nn.operators`) is its class and one line in :data:`MODELS`; a baseline in its
authors' own network configuration (``forward(fields, coords)`` as
:class:`~ddlearn.nn.model.NeuralOperator`, ``config["network"]`` its name) is its class and one
line in :data:`NETWORKS`.
"""
from __future__ import annotations

import inspect

from torch import nn

from .flare import FLAREMixer
from .flare_network import FLARENetwork
from .flarepp import FLAREPlusPlusMixer
from .galerkin import GalerkinMixer
from .mixer import TokenMixer
from .operators import FLARE, FLAREPlusPlus, GlobalAttention, SchwarzAttention
from .physics import PhysicsAttentionMixer
from .schwarz import SchwarzMixer
from .softmax import SoftmaxMixer
from .transolver_network import TransolverNetwork

__all__ = ["MIXERS", "mixer_class", "make_mixer", "MODELS", "NETWORKS", "build_network"]

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

#: a baseline's own network (its authors' block, norms, initialisation, projections) ``name`` ->
#: class: the study's second table, beside the one-backbone mixer swap
NETWORKS: dict[str, type[nn.Module]] = {c.name: c for c in (
    FLARENetwork,
    TransolverNetwork,
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
    one, and the coordinate dimension ``dim`` (where given) passed as its option ``dim`` to
    every mixer that takes one (those that read the coordinates,
    :attr:`~ddlearn.nn.mixer.TokenMixer.needs_points`); an explicit ``dim`` option wins."""
    cls = mixer_class(name)
    if dim is not None and "dim" in inspect.signature(cls).parameters:
        options = {"dim": dim, **options}
    mixer = cls(channels, heads, **options)
    if mixer.needs_layout:
        mixer.set_layout(layout)
    return mixer


def build_network(config: dict) -> nn.Module:
    """The network of :data:`NETWORKS` that a saved ``config`` names (``config["network"]``),
    built from the rest of it.

    Raises
    ------
    ValueError
        For a config that names no network of :data:`NETWORKS`.
    """
    name = config.get("network")
    if name not in NETWORKS:
        raise ValueError(f"config names network {name!r}, which is not one of {sorted(NETWORKS)}: "
                         f"a config saved by a network of ddlearn.nn.registry.NETWORKS carries "
                         f"its name under 'network'")
    return NETWORKS[name](**{k: v for k, v in config.items() if k != "network"})
