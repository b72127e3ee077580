r"""The functional kernels of Schwarz attention, written once for the paper-form operators, the
token mixers and their distributed forms.

Index sets are stored padded to the largest subdomain: ``index`` of shape ``(N, n_max)`` lists
:math:`I_i` followed by the pad index ``T`` (one slot past the last token, reading zero and
receiving nothing), ``sqrt_D`` holds :math:`D_i^{1/2}` there and zero on the padding (a
:class:`~ddlearn.decomposition.record.DecompositionRecord`). With them

- :func:`restrict` is :math:`z\mapsto (R_iz)_i` for all subdomains in one gather,
- :func:`extend_add` is :math:`(y_i)_i\mapsto\sum_iR_i^Ty_i` in one ``index_add``,
- :func:`schwarz_local` is the paper's local term
  :math:`\sum_iR_i^TD_i^{1/2}Q_iK_i^TD_i^{1/2}R_if` (gather, weights, two batched products,
  ``index_add``),
- :func:`coarse_restrict` and :func:`coarse_prolong` are :math:`\Phi^Tz` and :math:`\Phi c` for
  :math:`\Phi` in coordinate form (``rows``, ``cols``, ``vals``),
- :func:`route` is FLARE's encode/decode through latent queries.

The token axis is ``dim`` of the tensors (``1`` for ``(batch, n)`` right-hand sides, ``2`` for
``[batch, heads, tokens, d]`` attention inputs); everything else is broadcast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["restrict", "extend_add", "schwarz_local", "coarse_restrict",
           "coarse_prolong", "route"]


def restrict(z: torch.Tensor, index: torch.Tensor, dim: int) -> torch.Tensor:
    r""":math:`(R_iz)_i`: the token axis ``dim`` of ``z`` (``T`` tokens) becomes the two axes
    ``(N, n_max)`` of ``index``; the pad index ``T`` reads zero."""
    pad = z.new_zeros(z.shape[:dim] + (1,) + z.shape[dim + 1:])
    return torch.cat([z, pad], dim=dim).index_select(dim, index.reshape(-1)) \
        .unflatten(dim, tuple(index.shape))


def extend_add(y: torch.Tensor, index: torch.Tensor, tokens: int, dim: int) -> torch.Tensor:
    r""":math:`\sum_iR_i^Ty_i`, the adjoint of :func:`restrict`: the axes ``(dim, dim + 1)``
    of ``y`` (``(N, n_max)``) are added into ``tokens`` tokens; the padding is dropped."""
    flat = y.flatten(dim, dim + 1)
    out = flat.new_zeros(flat.shape[:dim] + (tokens + 1,) + flat.shape[dim + 1:])
    return out.index_add_(dim, index.reshape(-1), flat).narrow(dim, 0, tokens)


def schwarz_local(f: torch.Tensor, index: torch.Tensor, sqrt_D: torch.Tensor, Q: torch.Tensor,
                  K: torch.Tensor) -> torch.Tensor:
    r""":math:`\sum_i S_i^T D_i^{1/2} Q_iK_i^T D_i^{1/2} S_i f` for ``f`` of shape ``(B, m)``,
    where row ``i`` of ``index`` lists the entries :math:`S_i` of ``f`` block ``i`` sees
    (padded with ``m``) and ``Q``, ``K`` are ``(N, n_max, r)``.

    Used by the serial operator (:math:`S_i = R_i`) and by each rank of the distributed one
    (:math:`S_i` indexes the rank's owned and ghost entries).
    """
    x = restrict(f, index, 1) * sqrt_D                            # (B, N, n_max) = D^1/2 S_i f
    c = torch.einsum("bim,imr->bir", x, K)                        # K_i^T (.)
    y = torch.einsum("bir,imr->bim", c, Q) * sqrt_D               # D^1/2 Q_i (.)
    return extend_add(y, index, f.shape[1], 1)


def _along(vals: torch.Tensor, z: torch.Tensor, dim: int) -> torch.Tensor:
    """``vals`` shaped to multiply the entries of ``z`` along its axis ``dim``."""
    return vals.view((-1,) + (1,) * (z.dim() - dim - 1))


def coarse_restrict(z: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                    vals: torch.Tensor, n0: int, dim: int) -> torch.Tensor:
    r""":math:`\Phi^Tz` along the token axis ``dim`` (:math:`\Phi` given by its entries
    ``vals`` at ``(rows, cols)``): ``T`` tokens in, ``n0`` coarse values out."""
    out = z.new_zeros(z.shape[:dim] + (n0,) + z.shape[dim + 1:])
    return out.index_add_(dim, cols, z.index_select(dim, rows) * _along(vals, z, dim))


def coarse_prolong(c: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                   vals: torch.Tensor, tokens: int, dim: int) -> torch.Tensor:
    r""":math:`\Phi c` along the coarse axis ``dim``: ``n0`` coarse values in, ``tokens`` out."""
    out = c.new_zeros(c.shape[:dim] + (tokens,) + c.shape[dim + 1:])
    return out.index_add_(dim, rows, c.index_select(dim, cols) * _along(vals, c, dim))


def route(queries: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale=None,
          attn_scale: float | None = None) -> torch.Tensor:
    r"""FLARE's encode/decode of ``[B, H, T, d]`` tokens through the latent ``queries``
    (``[H, M, d]`` or ``[B, H, M, d]``):

    .. math:: Z = \mathrm{softmax}_{\text{tokens}}(a\,\tilde QK^T)\,V,\qquad
              Y = \mathrm{softmax}_{\text{latents}}(a\,K\tilde Q^T)\,(sZ),

    ``[B, H, T, d']``; ``scale`` (``s``, broadcast against ``Z``, e.g. ``[H, M, 1]``) scales
    the latent values between the two; ``attn_scale`` is the logit scale :math:`a`
    (``None``: SDPA's :math:`1/\sqrt d`; FLARE's authors use 1). Two fused
    ``scaled_dot_product_attention`` calls.
    """
    Qs = queries.expand(k.shape[0], -1, -1, -1)
    z = F.scaled_dot_product_attention(Qs, k, v, scale=attn_scale)
    return F.scaled_dot_product_attention(k, Qs, z if scale is None else z * scale,
                                          scale=attn_scale)
