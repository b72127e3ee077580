r"""The decomposition record: what the learned operators, the token mixers and their distributed
forms need of an overlapping decomposition of ``T`` points, PETSc-free, whatever made it (a
structured :class:`~.structured.Decomposition` or the partition of a point cloud,
:class:`ddlearn.nn.layout.TokenLayout`).

- the non-overlapping part of every point (``part``; the owner of the point);
- the overlapping index sets :math:`I_i` padded to the largest, ``index`` of shape
  ``(N, n_max)`` with the pad index ``T`` (one slot past the last point), and the weights
  :math:`D_i^{1/2}`, ``sqrt_D``, zero on the padding (:func:`padded_sets`), with
  :math:`D_i = \mathrm{diag}(1/m_j,\ j\in I_i)`, :math:`m_j` the number of sets holding ``j``;
- the coarse basis :math:`\Phi\in\mathbb R^{T\times n_0}` in coordinate form.

The ranks of the subdomains follow the solver's rule,
:func:`~.structured.assign_ranks` (:meth:`DecompositionRecord.owners`), and one rank's share
(its subdomains, owned and ghost points, the overlap exchange's pattern, its sets in local
numbering: :meth:`DecompositionRecord.rank_view`) is worked out here once, for the distributed
paper-form operator and the distributed mixer alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .groups import label_groups
from .structured import Decomposition, assign_ranks

__all__ = ["DecompositionRecord", "padded_sets", "exchange_pattern"]


def padded_sets(sets, multiplicity: np.ndarray, pad: int):
    r"""The padded index sets and weights of the overlapping sets ``sets`` (arrays of indices
    :math:`I_i`) with multiplicities :math:`m_j`:

    .. math:: \mathrm{index}_{i,k} = (I_i)_k,\qquad
              \mathrm{sqrt\_D}_{i,k} = \sqrt{1/m_{(I_i)_k}},\qquad k < n_i,

    ``pad`` and zero for :math:`n_i\le k<n_{max}`.

    Returns
    -------
    index : ndarray of int64, shape (N, n_max)
    sqrt_D : ndarray of float64, shape (N, n_max)
    sizes : ndarray of int64, shape (N,)
    """
    sizes = np.array([len(I) for I in sets], dtype=np.int64)
    n_max = int(sizes.max())
    index = np.full((len(sets), n_max), pad, dtype=np.int64)
    sqrt_D = np.zeros((len(sets), n_max))
    for i, I in enumerate(sets):  # set-up only, once per decomposition
        index[i, :len(I)] = I
        sqrt_D[i, :len(I)] = np.sqrt(1.0 / multiplicity[I])
    return index, sqrt_D, sizes


def exchange_pattern(owner: np.ndarray, touched, rank: int, owned: np.ndarray,
                     size: int) -> dict:
    r"""Who sends what in the overlap exchange of ``rank``, from the ownership alone (no
    communication).

    Parameters
    ----------
    owner : ndarray of int, shape (T,)
        The rank owning each index.
    touched : callable
        ``touched(r)``: the indices rank ``r`` needs (owned or not), any order, repeats allowed.
    rank : int
    owned : ndarray of int
        The indices ``rank`` owns, in the order of its local rows.
    size : int
        The number of ranks.

    Returns
    -------
    dict
        ``ghosts`` (the indices ``rank`` needs and others own, ordered by owner then index),
        ``recv`` (``{owner: count}`` in ``ghosts``' order) and ``send`` (``{rank: positions in
        owned}`` of the rows sent to each neighbour, in the neighbour's ghost order).
    """
    def ghosts_of(r):
        t = np.unique(np.asarray(touched(r), dtype=np.int64))
        t = t[owner[t] != r]
        return t[np.lexsort((t, owner[t]))]

    g = ghosts_of(rank)
    recv = {int(s): int(c) for s, c in zip(*np.unique(owner[g], return_counts=True))}
    pos = np.full(len(owner), -1, dtype=np.int64)
    pos[owned] = np.arange(len(owned))
    send = {}
    for r in range(size):
        if r == rank:
            continue
        theirs = ghosts_of(r)
        theirs = theirs[owner[theirs] == rank]  # increasing index: the order r receives them
        if len(theirs):
            send[r] = pos[theirs]
    return {"ghosts": g, "recv": recv, "send": send}


@dataclass(eq=False)
class DecompositionRecord:
    r"""Overlapping subdomains, partition of unity and coarse basis of ``tokens`` points (see
    the module docstring).

    Attributes
    ----------
    tokens : int
        ``T``, the points.
    index, sqrt_D : ndarray, shape (N, n_max)
        :math:`I_i` padded with ``T``; :math:`D_i^{1/2}` on :math:`I_i`, zero on the padding.
    sizes : ndarray, shape (N,)
        :math:`n_i = |I_i|`.
    part : ndarray, shape (T,)
        The non-overlapping part (subdomain) of every point.
    phi_rows, phi_cols, phi_vals : ndarray
        :math:`\Phi` in coordinate format; ``n0`` its columns (0: no coarse basis).
    """

    tokens: int
    index: np.ndarray
    sqrt_D: np.ndarray
    sizes: np.ndarray
    part: np.ndarray
    phi_rows: np.ndarray
    phi_cols: np.ndarray
    phi_vals: np.ndarray
    n0: int

    @property
    def N(self) -> int:
        return len(self.sizes)

    def part_index(self) -> np.ndarray:
        r"""Every subdomain's non-overlapping part (the points ``part`` gives it, increasing),
        padded with ``T``: shape ``(N, m_max)``, the index sets of :math:`\tilde R_i`, with
        :math:`\sum_i\tilde R_i^T\tilde R_i = I`.

        Raises
        ------
        ValueError
            Where a part is not inside its overlapping set (:math:`\tilde R_i` must select
            rows of :math:`R_i`).
        """
        T, N = self.tokens, self.N
        pairs = (np.arange(N)[:, None] * (T + 1) + self.index)[self.index < T]  # (i, t) codes
        outside = np.flatnonzero(~np.isin(self.part * (T + 1) + np.arange(T), pairs))
        if len(outside):
            raise ValueError(f"{len(outside)} point(s) (e.g. {outside[:5].tolist()}) lie outside "
                             f"the overlapping set of their own part: each part must be inside "
                             f"its set for the restricted form")
        return padded_sets(label_groups(self.part, N), np.ones(T), T)[0]

    def owners(self, P: int) -> np.ndarray:
        """The rank of each subdomain on ``P`` ranks (:func:`~.structured.assign_ranks`)."""
        return assign_ranks(self.N, P)

    @staticmethod
    def fields(sets, multiplicity: np.ndarray, part: np.ndarray, Phi) -> dict:
        """The record's fields from the overlapping sets, multiplicities, parts and the coarse
        basis (a sparse matrix, or ``None``)."""
        T = len(part)
        index, sqrt_D, sizes = padded_sets(sets, multiplicity, T)
        Phi = sp.coo_matrix((T, 0)) if Phi is None else sp.csr_matrix(Phi).tocoo()
        return {"tokens": T, "index": index, "sqrt_D": sqrt_D, "sizes": sizes,
                "part": np.asarray(part, dtype=np.int64),
                "phi_rows": Phi.row.astype(np.int64), "phi_cols": Phi.col.astype(np.int64),
                "phi_vals": Phi.data.astype(np.float64), "n0": int(Phi.shape[1])}

    @classmethod
    def of_grid(cls, dec: Decomposition, Phi=None) -> "DecompositionRecord":
        """The record of a structured decomposition with the coarse basis ``Phi`` (or none)."""
        part = np.empty(dec.n, dtype=np.int64)
        for i, owned in enumerate(dec.owned):
            part[owned] = i
        return cls(**cls.fields(dec.subdomains, dec.multiplicity, part, Phi))

    def rank_view(self, P: int, rank: int, owner: np.ndarray | None = None,
                  owned: np.ndarray | None = None, trim: bool = True,
                  parts: bool = False) -> dict:
        r"""The share of ``rank`` of ``P`` (from the record alone, no communication).

        Parameters
        ----------
        P, rank : int
        owner : array of int, shape (N,), optional
            The rank of each subdomain (default :meth:`owners`); every rank needs one.
        owned : array of int, optional
            The points ``rank`` owns in the order of its local rows (default: the points of
            its subdomains' non-overlapping parts, increasing).
        trim : bool
            Pad the local index sets to this rank's largest subdomain (default) or keep the
            record's width (for per-subdomain parameters of that width).
        parts : bool
            Also the subdomains' non-overlapping parts in local numbering (the restricted
            form's queries).

        Returns
        -------
        dict
            ``subdomains`` (this rank's subdomain numbers), ``owned`` (:math:`O_r`), ``ghosts``
            (:math:`G_r`, ordered by owner then point number), ``recv`` (``{owner: count}`` of
            ghost rows, in ``ghosts``' order), ``send`` (``{rank: positions in owned}`` of the
            rows this rank sends to each neighbour, matching the neighbour's ghost order),
            ``local`` (``index`` of the rank's subdomains in local numbering :math:`[O_r, G_r]`,
            padded with :math:`|O_r|+|G_r|`; ``sqrt_D``, ``sizes``; with ``parts``, also
            ``parts``, :meth:`part_index` of the rank's subdomains in that numbering) and
            ``phi`` (the entries
            of :math:`\Phi` in owned rows: ``rows`` local, ``cols``, ``vals``, and ``mean``,
            :math:`\Phi` scaled so that its columns sum to one).

        Raises
        ------
        ValueError
            For an ``owner`` that is not one rank in ``0..P-1`` per subdomain, a rank left
            without a subdomain, or (``parts``) a part outside its set (the same on every rank:
            the record is global) or a point of this rank's parts that ``owned`` leaves out.
        """
        N, T = self.N, self.tokens
        owner = self.owners(P) if owner is None else np.asarray(owner, dtype=np.int64)
        if owner.shape != (N,) or owner.min() < 0 or owner.max() >= P:
            raise ValueError(f"subdomain_ranks must give each of the {N} subdomains a rank in "
                             f"0..{P - 1}")
        missing = np.setdiff1d(np.arange(P), owner)
        if len(missing):
            raise ValueError(f"ranks {missing[:5].tolist()} get no subdomain: give every rank at "
                             f"least one (more subdomains or fewer ranks)")
        token_rank = owner[self.part]  # the owner of every point
        mine = np.flatnonzero(owner == rank)
        owned = np.flatnonzero(token_rank == rank) if owned is None else np.asarray(owned)

        def touched(r):  # the points of rank r's subdomains, owned or not
            idx = self.index[owner == r]
            return idx[idx < T]

        pattern = exchange_pattern(token_rank, touched, rank, owned, P)
        ghost_rows = pattern["ghosts"]
        local = np.full(T + 1, -1, dtype=np.int64)
        local[owned] = np.arange(len(owned))
        local[ghost_rows] = len(owned) + np.arange(len(ghost_rows))
        local[T] = len(owned) + len(ghost_rows)  # padding
        sizes = self.sizes[mine]
        width = int(sizes.max()) if trim else self.index.shape[1]
        colsum = np.bincount(self.phi_cols, weights=self.phi_vals, minlength=self.n0)
        keep = token_rank[self.phi_rows] == rank
        cols = self.phi_cols[keep]
        view = {"subdomains": mine, "owned": owned, "ghosts": ghost_rows,
                "recv": pattern["recv"], "send": pattern["send"],
                "local": {"index": local[self.index[mine, :width]],
                          "sqrt_D": self.sqrt_D[mine, :width], "sizes": sizes},
                "phi": {"rows": local[self.phi_rows[keep]], "cols": cols,
                        "vals": self.phi_vals[keep], "mean": self.phi_vals[keep] / colsum[cols]}}
        if parts:
            own = self.part_index()[mine]
            own = local[own[:, :max(1, int((own < T).sum(axis=1).max()))]]
            if (own < 0).any():
                raise ValueError(f"rank {rank}: owned leaves out points of its subdomains' "
                                 f"parts; give it every point of them")
            view["local"]["parts"] = own
        return view
