r"""The token-mixer interface: ``mixer(x)`` maps ``x`` of shape ``[batch, tokens, channels]``
to the same shape.

Every mixer of :data:`ddlearn.nn.registry.MIXERS` is a :class:`TokenMixer`: constructed as
``Mixer(channels, heads=..., **options)``, holding only parameters that do not depend on the
number of tokens, so that a model trained on one mesh runs on another. A mixer whose structure
comes from the mesh (:attr:`TokenMixer.needs_layout`) takes a
:class:`~ddlearn.nn.layout.TokenLayout` with :meth:`TokenMixer.set_layout`; the others ignore
it. A mixer that reads the token coordinates themselves (:attr:`TokenMixer.needs_points`:
Galerkin's positional channels, Transolver's grid convolutions) takes them with
:meth:`TokenMixer.set_points`; :meth:`ddlearn.nn.model.NeuralOperator.use_mesh` gives every
mixer both. A network of mixers takes ``fields [B, T, in_fields]`` on points
``coords [T, dim]`` (:func:`check_inputs`).
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["TokenMixer", "split_heads", "merge_heads", "check_inputs"]


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, T, H d] -> [B, H, T, d]``."""
    B, T, C = x.shape
    return x.view(B, T, heads, C // heads).transpose(1, 2)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, d] -> [B, T, H d]``."""
    B, H, T, d = y.shape
    return y.transpose(1, 2).reshape(B, T, H * d)


def check_inputs(fields: torch.Tensor, coords: torch.Tensor, in_fields: int, dim: int) -> None:
    """Check the inputs of a network of mixers: ``fields`` ``[B, T, in_fields]``, ``coords``
    ``[T, dim]``, all finite.

    Raises
    ------
    ValueError
        Naming the expected shape, or the NaN / inf.
    """
    if fields.dim() != 3 or fields.shape[-1] != in_fields:
        raise ValueError(f"fields must have shape [batch, tokens, {in_fields}], got "
                         f"{tuple(fields.shape)}")
    if coords.shape != (fields.shape[1], dim):
        raise ValueError(f"coords must have shape ({fields.shape[1]}, {dim}) (one point per "
                         f"token), got {tuple(coords.shape)}")
    if not (torch.isfinite(fields).all() and torch.isfinite(coords).all()):
        raise ValueError("the inputs contain NaN or inf: clean or drop those samples")


class TokenMixer(nn.Module):
    """Base class: ``channels`` split into ``heads`` heads of ``channels // heads``.

    Subclasses set :attr:`name` (their registry name) and implement :meth:`mix`;
    :meth:`forward` checks the input first.
    """

    name = "mixer"
    needs_layout = False
    needs_points = False

    def __init__(self, channels: int, heads: int = 4):
        super().__init__()
        if channels < 1 or heads < 1 or channels % heads:
            valid = [h for h in range(1, channels + 1) if channels % h == 0]
            raise ValueError(f"{type(self).__name__}: channels ({channels}) must be a positive "
                             f"multiple of heads ({heads})"
                             + (f": heads for {channels} channels: {valid}" if valid else ""))
        self.channels, self.heads, self.head_dim = int(channels), int(heads), channels // heads
        self.layout = None
        self.points = None

    def set_layout(self, layout) -> None:
        """Use ``layout`` (a :class:`~ddlearn.nn.layout.TokenLayout`) from now on."""
        self.layout = layout

    def set_points(self, coords) -> None:
        """Use the token coordinates ``coords`` (shape ``(T, dim)``) from now on (kept only by
        mixers that :attr:`needs_points`)."""
        if self.needs_points:
            self.points = torch.as_tensor(coords)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.channels:
            raise ValueError(f"{self.name} mixer: input must have shape [batch, tokens, "
                             f"{self.channels}], got {tuple(x.shape)}")
        if self.needs_layout:
            if self.layout is None:
                raise ValueError(f"{self.name} mixer has no token layout: call "
                                 f"set_layout(TokenLayout.build(coords, ...)) first")
            self.layout.check_tokens(x, f"{self.name} mixer")
        if self.needs_points and (self.points is None or self.points.shape[0] != x.shape[1]):
            got = "none" if self.points is None else f"{self.points.shape[0]} points"
            raise ValueError(f"{self.name} mixer reads the token coordinates and has {got} for "
                             f"{x.shape[1]} tokens: call set_points(coords) (or the model's "
                             f"use_mesh(coords)) with this mesh's coordinates first")
        return self.mix(x)

    def mix(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError
