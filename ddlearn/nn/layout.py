r"""Token layouts: the overlapping subdomains, partition of unity and coarse basis of a point
cloud, built once from the token coordinates and cached.

A layout of ``T`` tokens at points :math:`p_t\in\mathbb R^{dim}` holds, as in the solver:

- ``N`` non-overlapping parts from one of the solver's partitioners (``boxes``, ``rcb``,
  ``metis``, ...: :data:`~ddlearn.decomposition.partition.PARTITIONERS`, the one list, called on
  this process's points by :func:`~ddlearn.decomposition.partition.partition_points`), each
  grown by ``overlap`` layers of the token graph into the overlapping index set :math:`I_i` (:math:`R_i` its restriction);
- the partition of unity :math:`D_i = \mathrm{diag}(1/m_t,\ t\in I_i)` with :math:`m_t` the
  number of sets containing token ``t``, so that :math:`\sum_i R_i^TD_iR_i = I`;
- a coarse basis :math:`\Phi\in\mathbb R^{T\times n_0}` of
  :data:`~ddlearn.decomposition.coarse.COARSE_BASES` (the one list, shared with the paper-form
  operators), completed where its rows sum below one by a last column, so that they sum to one:
  ``nicolaides`` (the default, one column per subdomain, :math:`\Phi e_i = R_i^TD_iR_i\mathbf
  1`, already a partition of unity) or ``hats`` (the Q1 interface hats of a box partition,
  :func:`~ddlearn.decomposition.coarse.hats_on_boxes`, completed near the boundary).

The token graph is given (a mesh's adjacency) or built from the coordinates: every token's
neighbours up to the distance of its ``2 dim``-th nearest one, ties included (so that the graph
does not depend on the order of the tokens), symmetrised (on a tensor grid: the grid graph, plus
the diagonal neighbours of boundary points).

The index sets are stored padded to the largest subdomain, ``index`` of shape ``(N, n_max)``
with padding ``T`` (a dummy token) and weights ``sqrt_D`` zero there, so that a mixer gathers all
subdomains in one indexing call and never loops over them.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from scipy.spatial import cKDTree

from ..decomposition.coarse import COARSE_BASES, BasisInput
from ..decomposition.record import DecompositionRecord
from ..decomposition.partition import PARTITIONERS, partition_points, unknown_partitioner
from ..decomposition.serial_partition import grow_overlap

__all__ = ["TokenLayout", "token_graph"]

#: the most recently built layouts by fingerprint (bounded: a long run over many meshes keeps
#: only the last few)
_CACHE: "OrderedDict[str, TokenLayout]" = OrderedDict()
_CACHE_SIZE = 16


def token_graph(coords: np.ndarray) -> sp.csr_matrix:
    """Symmetric adjacency (no diagonal): every point joined to the points within the distance
    of its ``2 dim``-th nearest neighbour (ties included: independent of the point order)."""
    T, dim = coords.shape
    k = min(2 * dim, T - 1)
    if k < 1:
        return sp.csr_matrix((T, T))
    tree = cKDTree(coords)
    dist, _ = tree.query(coords, k=k + 1)
    near = tree.query_ball_point(coords, r=dist[:, -1] * (1 + 1e-9))
    rows = np.repeat(np.arange(T), [len(n) for n in near])
    G = sp.csr_matrix((np.ones(len(rows)), (rows, np.concatenate(near))), shape=(T, T))
    G = ((G + G.T) > 0).astype(np.float64)
    G.setdiag(0)
    G.eliminate_zeros()
    return G.tocsr()


def _cached(fp: str, make) -> "TokenLayout":
    """The cached layout of fingerprint ``fp``, else ``make()`` cached."""
    if fp not in _CACHE:
        _CACHE[fp] = make()
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(fp)
    return _CACHE[fp]


def _fingerprint(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


@dataclass(eq=False)
class TokenLayout(DecompositionRecord):
    r"""Subdomains, partition of unity and coarse basis of ``T`` tokens (see module docstring).

    Build with :meth:`build`; equal arguments return the same cached object.

    The fields of :class:`~ddlearn.decomposition.record.DecompositionRecord` (``tokens``,
    ``index``, ``sqrt_D``, ``sizes``, ``part``, ``phi_rows``, ``phi_cols``, ``phi_vals``,
    ``n0``), and:

    Attributes
    ----------
    dim : int
        The coordinate dimension.
    settings : dict
        The arguments it was built from; ``fingerprint`` identifies coordinates + settings.
    """

    dim: int = 0
    settings: dict = field(default_factory=dict)
    fingerprint: str = ""
    _tensors: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, coords, subdomains: int | None = None, overlap: int = 1,
              partitioner: str = "boxes", coarse: str = "nicolaides", subdomain_size: int | None = None,
              graph: sp.spmatrix | None = None) -> "TokenLayout":
        r"""The layout of the points ``coords`` (shape ``(T, dim)``), cached.

        Parameters
        ----------
        coords : array_like, shape (T, dim)
        subdomains : int, optional
            ``N``. Default: ``T / subdomain_size`` rounded, else 16.
        overlap : int
            Graph layers added to every part (0: non-overlapping).
        partitioner : str
            A name of :data:`~ddlearn.decomposition.partition.PARTITIONERS` that cuts a point
            set (``boxes``, ``rcb``, ``metis``, ``local_metis``).
        coarse : str
            A name of :data:`~ddlearn.decomposition.coarse.COARSE_BASES` (``nicolaides``,
            ``hats``); ``hats`` needs ``partitioner='boxes'``.
        subdomain_size : int, optional
            Target tokens per part, so that a finer mesh gets more subdomains of the same size
            (``boxes`` on a tensor grid: per axis, its points over the box side
            ``subdomain_size^(1/dim)``, rounded; otherwise ``T / subdomain_size``).
        graph : sparse matrix, shape (T, T), optional
            Token adjacency (default :func:`token_graph`).

        Raises
        ------
        ValueError
            For coordinates that are not a finite ``(T, dim)`` array, an unknown partitioner or
            coarse basis, ``N`` outside ``1..T``, a negative overlap, a graph of the wrong
            shape, or a partition with an empty part.
        """
        coords = np.asarray(coords, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[0] < 1 or coords.shape[1] < 1:
            raise ValueError(f"coords must have shape (tokens, dim), got {coords.shape}")
        if not np.all(np.isfinite(coords)):
            raise ValueError("coords contain NaN or inf: pass finite token coordinates")
        T, dim = coords.shape
        if partitioner not in PARTITIONERS:
            raise ValueError(unknown_partitioner(partitioner, "partitioner="))
        if coarse not in COARSE_BASES:
            raise ValueError(f"unknown coarse basis {coarse!r}: use one of {tuple(COARSE_BASES)}")
        if coarse == "hats" and partitioner != "boxes":
            raise ValueError("coarse='hats' needs partitioner='boxes' (hats live on a box grid); "
                             "use coarse='nicolaides' with rcb or metis")
        counts = [len(np.unique(coords[:, a])) for a in range(dim)]
        if subdomains is None and subdomain_size and partitioner == "boxes" \
                and int(np.prod(counts)) == T:
            # a tensor grid: per axis, its points over the side of a box of subdomain_size
            side = float(subdomain_size) ** (1.0 / dim)
            subdomains = int(np.prod([max(1, round(c / side)) for c in counts]))
        elif subdomains is None:
            subdomains = max(1, round(T / subdomain_size)) if subdomain_size else 16
        N = int(subdomains)
        if not 1 <= N <= T:
            raise ValueError(f"subdomains must be in 1..{T} (the tokens), got {N}")
        if int(overlap) < 0:
            raise ValueError(f"overlap must be >= 0 graph layers, got {overlap}")
        if graph is not None and graph.shape != (T, T):
            raise ValueError(f"graph has shape {graph.shape}; it needs ({T}, {T}), one row and "
                             f"column per token")
        settings = {"subdomains": N, "overlap": int(overlap), "partitioner": partitioner,
                    "coarse": coarse}
        graph_key = "knn" if graph is None else _fingerprint(graph.tocsr().indptr,
                                                              graph.tocsr().indices)
        fp = _fingerprint(coords, np.frombuffer(repr(sorted(settings.items())).encode()
                                                + graph_key.encode(), dtype=np.uint8))
        return _cached(fp, lambda: cls._of_points(coords, G=graph, N=N, overlap=int(overlap),
                                                  partitioner=partitioner, coarse=coarse,
                                                  dim=dim, settings=settings, fp=fp))

    @classmethod
    def _of_points(cls, coords, G, N, overlap, partitioner, coarse, dim, settings, fp):
        T = coords.shape[0]
        G = token_graph(coords) if G is None else sp.csr_matrix(G, dtype=np.float64)
        found = partition_points(partitioner, coords, G, N)
        part, hats = found.part, found.boxes
        empty = np.flatnonzero(np.bincount(part, minlength=N) == 0)
        if len(empty):
            raise ValueError(f"the {partitioner} partition of {T} tokens into {N} parts left "
                             f"{len(empty)} part(s) empty (e.g. {empty[:5].tolist()}): use fewer "
                             f"subdomains or another partitioner")
        S = grow_overlap(G, part, N, overlap).tocsc()  # (T, N) incidence of the I_i
        m = np.asarray(S.sum(axis=1)).ravel()
        sets = np.split(S.indices, S.indptr[1:-1])
        # an empty basis (hats with one box along an axis) leaves the completing column alone
        Phi = COARSE_BASES[coarse](BasisInput(T, sets, m, hats)).tocsr()
        rest = 1.0 - np.asarray(Phi.sum(axis=1)).ravel()
        if (rest > 1e-14).any():  # complete to a partition of unity (pooling by weighted means)
            Phi = sp.hstack([Phi, sp.csr_matrix(np.where(rest > 1e-14, rest, 0.0)[:, None])]
                            ).tocsr()
        return cls(**cls.fields(sets, m, part, Phi), dim=dim, settings=settings, fingerprint=fp)

    @classmethod
    def of_sets(cls, sets, part, dim: int = 0) -> "TokenLayout":
        r"""The layout of a decomposition made elsewhere (a PC's subdomains): the overlapping
        index sets :math:`I_i` (``sets``, arrays of token numbers) and the non-overlapping part
        of every token (``part``, shape ``(T,)``), with the Nicolaides coarse basis; cached by
        the sets.

        Raises
        ------
        ValueError
            When a token lies in no set, or a part number has no set.
        """
        part = np.asarray(part, dtype=np.int64)
        sets = [np.asarray(I, dtype=np.int64) for I in sets]
        T, N = len(part), len(sets)
        if part.size and (part.min() < 0 or part.max() >= N):
            raise ValueError(f"part numbers must lie in 0..{N - 1} (one per set), got "
                             f"{part.min()}..{part.max()}")
        m = np.bincount(np.concatenate(sets), minlength=T) if sets else np.zeros(T, np.int64)
        if (m == 0).any():
            raise ValueError(f"{int((m == 0).sum())} token(s) lie in no set (e.g. "
                             f"{np.flatnonzero(m == 0)[:5].tolist()}): the sets must cover "
                             f"every token")
        settings = {"subdomains": N, "overlap": None, "partitioner": "given",
                    "coarse": "nicolaides"}
        fp = _fingerprint(part, *sets)
        return _cached(fp, lambda: cls(**cls.fields(
            sets, m, part, COARSE_BASES["nicolaides"](BasisInput(T, sets, m, None))),
            dim=int(dim), settings=settings, fingerprint=fp))

    def check_tokens(self, x: torch.Tensor, who: str) -> None:
        """Raise a clear error when ``x`` (``[batch, tokens, channels]``) does not fit."""
        if x.dim() != 3:
            raise ValueError(f"{who}: input must have shape [batch, tokens, channels], got "
                             f"{tuple(x.shape)}")
        if x.shape[1] != self.tokens:
            raise ValueError(f"{who}: input has {x.shape[1]} tokens but the layout has "
                             f"{self.tokens}: build the layout from this mesh's coordinates "
                             f"(TokenLayout.build) and set it with set_layout")

    def tensors(self, device, dtype, parts: bool = False) -> dict:
        """The layout as torch tensors on ``device`` (cached per device and dtype): ``index``,
        ``sqrt_D``, ``mask`` (True on real entries), ``n`` (sizes), ``phi_rows``,
        ``phi_cols``, ``phi_vals``, ``phi_mean`` (:math:`\\Phi` scaled so that its columns sum
        to one: pooling by weighted means); with ``parts``, also ``parts``
        (:meth:`part_index`, for the restricted form)."""
        key = (str(device), dtype)
        if parts and "parts" not in self._tensors.get(key, {}):
            self.tensors(device, dtype)["parts"] = torch.as_tensor(
                self.part_index(), dtype=torch.long, device=device)
        if key not in self._tensors:
            colsum = np.bincount(self.phi_cols, weights=self.phi_vals, minlength=self.n0)
            t = lambda a, dt=dtype: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
            self._tensors[key] = {
                "index": t(self.index, torch.long),
                "sqrt_D": t(self.sqrt_D),
                "mask": t(self.sqrt_D > 0, torch.bool),
                "n": t(self.sizes),
                "phi_rows": t(self.phi_rows, torch.long),
                "phi_cols": t(self.phi_cols, torch.long),
                "phi_vals": t(self.phi_vals),
                "phi_mean": t(self.phi_vals / colsum[self.phi_cols]),
            }
        return self._tensors[key]

    def describe(self) -> dict:
        return {**self.settings, "tokens": self.tokens, "n0": self.n0,
                "max_subdomain": int(self.sizes.max()), "min_subdomain": int(self.sizes.min()),
                "fingerprint": self.fingerprint}
