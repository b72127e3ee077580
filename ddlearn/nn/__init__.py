"""Schwarz attention in torch (no PETSc): the functional kernels (:mod:`.kernels`) and on them
the paper-form operator-learning models (:mod:`.operators`, :data:`MODELS`) and the token mixers
for neural operators on meshes with the attention baselines in one interface (:data:`MIXERS`),
one backbone, datasets, training and checkpoints; their distributed forms communicate through
:mod:`.comm` (mpi4py).

``mixer(x)`` maps ``x`` of shape ``[batch, tokens, channels]`` to the same shape; mixers that
follow the mesh (Schwarz attention) take a :class:`TokenLayout` built once from the token
coordinates.
"""
from .layout import TokenLayout
from .mixer import TokenMixer
from .registry import MIXERS, MODELS, make_mixer, mixer_class

__all__ = ["TokenLayout", "TokenMixer", "MIXERS", "MODELS", "make_mixer", "mixer_class"]
