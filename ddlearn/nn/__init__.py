"""Token mixers for neural operators on meshes (torch only, no PETSc): Schwarz attention and the
attention baselines in one interface, one backbone, datasets, training and checkpoints.

``mixer(x)`` maps ``x`` of shape ``[batch, tokens, channels]`` to the same shape; mixers that
follow the mesh (Schwarz attention) take a :class:`TokenLayout` built once from the token
coordinates. :data:`MIXERS` names them all.
"""
from .layout import TokenLayout
from .mixer import TokenMixer
from .registry import MIXERS, make_mixer, mixer_class

__all__ = ["TokenLayout", "TokenMixer", "MIXERS", "make_mixer", "mixer_class"]
