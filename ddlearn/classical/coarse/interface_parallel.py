r"""The GDSW-type coarse spaces built from each rank's own rows: nothing gathered on one rank.

The same spaces as the serial builds of :mod:`.interface`, :mod:`.gdsw` and :mod:`.rgdsw` (the
same columns to round-off, up to an orthonormal change of basis within each interface group),
in five steps whose memory on a rank is its own rows, their halo (one graph layer) and its
parts' blocks :math:`A[O_i, O_i]`, plus :math:`O(\text{groups})` metadata:

1. *The halo* (:class:`InterfaceHalo`): the part of each of this rank's nodes (sent by the
   parts' holders) and of the nodes its rows reach; the interface :math:`\Gamma` (a node with a
   matrix neighbour in another part) and each interface node's touch set (its part and its
   neighbours') follow from the rank's own rows.
2. *Components* (:func:`components`): neighbouring interface nodes with equal touch sets (and,
   with a coefficient split, stiffness within the ratio) are connected; the components are
   found by label propagation, each node taking the smallest global node number its rank's
   piece of the component reaches, the halo's labels exchanged until no label changes (one
   round per rank a component crosses). A component is numbered by its smallest node in the
   serial order, so the numbering is the serial build's.
3. *Groups*: GDSW's are the components (weight 1); RGDSW's the coarse nodes
   (:func:`~.interface.coarse_nodes` on the components' touch sets, allgathered: :math:`O(C)`
   metadata for :math:`C` components), a node in all those whose touch set contains its own,
   weight :math:`1/|C_j|`.
4. *Interface values* (:func:`interface_columns`): per group :math:`g` an orthonormal basis
   of the range of :math:`W_g Z|_g`, by a tall-skinny QR across ranks: each rank's rows of
   the group reduce to their :math:`R` factor, the group's owner (the rank of its smallest
   node) takes the SVD :math:`[R_r]_r = U\Sigma V^T` of the stacked factors, keeps
   :math:`\sigma > 10^{-10}\sigma_1` (a rotation on collinear nodes drops) and sends back
   :math:`T_g = V\Sigma^{-1}`; each rank's rows of the basis are :math:`W_g Z|_g T_g`.
5. *Extension* (:func:`extension`): every part's holder receives its interface rows of
   :math:`\Phi_\Gamma`, extracts :math:`A[O_i, O_i]` and solves
   :math:`\Phi_I = -A_{II}^{-1} A_{I\Gamma} \Phi_\Gamma` for the columns that touch the part.

Communication: a fixed number of all-to-alls of the halo's size per step, plus the rounds of
step 2. :math:`\Phi` travels as each rank's entries (:class:`~..coarse_space.CoarseVectors`)
with the coarse matrix in the Schur complement's form,
:math:`A_0 = \Phi_\Gamma^T A_{\Gamma\Gamma}\Phi_\Gamma - \sum_i B_i^T X_i` (:func:`extension`):
a triple product with the thin interface rows and the parts' dense blocks, instead of the
product with :math:`\Phi`'s full rows
(:func:`~ddlearn.decomposition.petsc_rows.schur_galerkin`). Assumes
a structurally symmetric matrix (an interface node's neighbours see it as theirs).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from mpi4py import MPI
from petsc4py import PETSc

from ...decomposition.groups import label_groups
from ...decomposition.parallel_partition import bits_float, exchange, fetch_values, float_bits
from ...decomposition.subdomains import node_dofs
from ..coarse_space import CoarseInput, CoarseVectors, SchurGalerkin
from ..overlapping import SparseSolver
from .interface import coarse_nodes, padded_rows, touch_incidence

__all__ = ["InterfaceHalo", "components", "gdsw_groups", "rgdsw_groups", "interface_columns",
           "extension", "grouped", "parallel_vectors", "alltoall_items", "part_holders"]

#: singular values of a group's values kept, relative to the largest (as the serial build)
RTOL = 1e-10


def _entries(rows: list, cols: list, vals: list) -> tuple:
    """Lists of per-piece ``(rows, cols, vals)`` arrays joined (empty arrays for no piece)."""
    cat = np.concatenate
    return (cat(rows + [np.zeros(0, np.int64)]), cat(cols + [np.zeros(0, np.int64)]),
            cat(vals + [np.zeros(0)]))


class InterfaceHalo:
    r"""This rank's nodes ``lo..hi-1`` (node :math:`a`: dofs :math:`b a .. b a + b - 1`) with
    their parts, the halo nodes their rows reach, the interface and the touch sets.

    Attributes
    ----------
    part : ndarray
        The part of each own node.
    gamma : ndarray
        The own interface nodes (local numbers, sorted).
    touch : ndarray
        Their touch sets, one sorted row per interface node padded with -1 to the widest
        touch set of any rank.
    graph : scipy.sparse.csr_matrix
        The own nodes' graph (global columns) of nonzero couplings (:func:`.interface.node_matrix`'s
        pattern).
    stiffness : ndarray
        Each own node's stiffness (:func:`.interface.node_stiffness`).
    """

    def __init__(self, A, subdomains, block_size: int):
        mpi = A.getComm().tompi4py()
        bs = int(block_size)
        self.mpi, self.bs, self.N = mpi, bs, int(subdomains.N)
        self.ranges = np.asarray(A.getOwnershipRanges(), dtype=np.int64) // bs
        self.lo, self.hi = (int(x) for x in self.ranges[mpi.Get_rank():mpi.Get_rank() + 2])
        nl, n = self.hi - self.lo, int(self.ranges[-1])
        indptr, indices, values = A.getValuesCSR()
        indices = np.asarray(indices, dtype=np.int64)
        dof_row = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        # the interface is read from the stored pattern, the touch sets and components from
        # the nonzero couplings between nodes: the serial build's choices
        stored = sp.csr_matrix((np.ones(len(indices), dtype=np.int8),
                                (dof_row // bs, indices // bs)), shape=(nl, n))
        nz = np.ones(len(indices), dtype=bool) if bs == 1 else values != 0
        self.graph = sp.csr_matrix((np.ones(int(nz.sum()), dtype=np.int8),
                                    (dof_row[nz] // bs, indices[nz] // bs)), shape=(nl, n))
        for M in (stored, self.graph):
            M.sum_duplicates()
        diagonal = A.getDiagonal()
        self.stiffness = np.abs(diagonal.getArray(readonly=True)).reshape(-1, bs).sum(axis=1)
        diagonal.destroy()
        # the parts of the own nodes: each holder tells the owners of its parts' nodes
        nodes = [np.unique(o // bs) for o in subdomains.owned]
        sent = np.concatenate(nodes + [np.zeros(0, dtype=np.int64)]).astype(np.int64)
        ids = np.repeat(np.asarray(subdomains.ids, dtype=np.int64), [len(x) for x in nodes])
        got, _ = exchange(mpi, self._owner(sent), np.column_stack([sent, ids]))
        self.part = np.full(nl, -1, dtype=np.int64)
        self.part[got[:, 0] - self.lo] = got[:, 1]
        self.halo = np.setdiff1d(np.union1d(stored.indices, self.graph.indices),
                                 np.arange(self.lo, self.hi))
        self.halo_part = fetch_values(mpi, self.ranges, self.part[:, None], self.halo)[:, 0]
        cross = self.part_of(stored.indices) != self.part[np.repeat(np.arange(nl),
                                                                    np.diff(stored.indptr))]
        self.gamma = np.unique(np.repeat(np.arange(nl), np.diff(stored.indptr))[cross])
        rows = self.graph[self.gamma]
        T = touch_incidence(rows, self.part_of(rows.indices), self.part[self.gamma],
                            subdomains.N)
        # at least one column: a non-interface node reads as a row of -1 (no interface: N = 1)
        self.width = max(1, int(mpi.allreduce(int(np.diff(T.indptr).max(initial=0)),
                                              op=MPI.MAX)))
        self.touch = padded_rows(T, self.width)

    def _owner(self, nodes: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ranges, nodes, side="right") - 1

    def part_of(self, nodes: np.ndarray) -> np.ndarray:
        """The part of any own or halo node."""
        nodes = np.asarray(nodes, dtype=np.int64)
        own = (nodes >= self.lo) & (nodes < self.hi)
        out = np.empty(len(nodes), dtype=np.int64)
        out[own] = self.part[nodes[own] - self.lo]
        out[~own] = self.halo_part[np.searchsorted(self.halo, nodes[~own])]
        return out

    def on_gamma(self, values: np.ndarray, fill: int = -1) -> np.ndarray:
        """Rows ``values`` of the own interface nodes spread to every own node (``fill`` off
        the interface), shape ``(local nodes, w)``: what :func:`fetch_values` serves."""
        out = np.full((self.hi - self.lo, values.shape[1]), fill, dtype=np.int64)
        out[self.gamma] = values
        return out


def components(h: InterfaceHalo, split_ratio: float = 0.0):
    r"""``(component, owner, keys)``: the global component of each own interface node, the
    rank owning each component's smallest node (all components, in order), and the touch sets
    of the components whose smallest node this rank owns (rows in component order, padded
    with -1). Two neighbouring interface nodes :math:`j, k` are connected when their touch
    sets are equal and, for ``split_ratio`` :math:`\rho > 0`,
    :math:`\max(s_j, s_k) < \rho \min(s_j, s_k)` (:func:`.interface.coefficient_pieces`).
    Collective."""
    mpi, lo = h.mpi, h.lo
    ghost_touch = fetch_values(mpi, h.ranges, h.on_gamma(h.touch), h.halo)
    ghost_gamma = np.flatnonzero(ghost_touch[:, 0] >= 0)
    ghosts = h.halo[ghost_gamma]
    m = len(h.gamma)
    # the local graph of own and halo interface nodes: own j first, then the halo's
    rows = h.graph[h.gamma].tocoo()
    col = rows.col.astype(np.int64)
    own = (col >= lo) & (col < h.hi)
    where = np.full(len(col), -1, dtype=np.int64)
    position = np.full(h.hi - lo, -1, dtype=np.int64)
    position[h.gamma] = np.arange(m)
    where[own] = position[col[own] - lo]
    at = np.searchsorted(ghosts, col[~own])
    hit = at < len(ghosts)
    hit[hit] = ghosts[at[hit]] == col[~own][hit]
    where[np.flatnonzero(~own)[hit]] = m + at[hit]
    touch = np.vstack([h.touch, ghost_touch[ghost_gamma]])
    edge = where >= 0
    r, c = rows.row[edge], where[edge]
    same = (touch[r] == touch[c]).all(axis=1)
    if split_ratio:
        s = np.concatenate([h.stiffness[h.gamma], bits_float(fetch_values(
            mpi, h.ranges, float_bits(h.stiffness)[:, None], ghosts)[:, 0])])
        same &= np.maximum(s[r], s[c]) < split_ratio * np.minimum(s[r], s[c])
    total = m + len(ghosts)
    G = sp.csr_matrix((np.ones(int(same.sum())), (r[same], c[same])), shape=(total, total))
    _, piece = csgraph.connected_components(G, directed=False)
    label = lo + h.gamma.astype(np.int64)
    while True:  # each piece takes the smallest label it reaches, the halo's from their owners
        ghost = fetch_values(mpi, h.ranges, h.on_gamma(label[:, None]), ghosts)[:, 0]
        least = np.full(piece.max(initial=-1) + 1, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, piece, np.concatenate([label, ghost]))
        new = least[piece[:m]]
        if not mpi.allreduce(bool((new != label).any()), op=MPI.LOR):
            break
        label = new
    roots = np.flatnonzero(label == lo + h.gamma)  # the own nodes that are a component's smallest
    first = mpi.exscan(len(roots)) or 0
    number = np.full(h.hi - lo, -1, dtype=np.int64)
    number[h.gamma[roots]] = first + np.arange(len(roots))
    component = np.empty(m, dtype=np.int64)
    here = (label >= lo) & (label < h.hi)
    component[here] = number[label[here] - lo]
    away = np.unique(label[~here])
    component[~here] = fetch_values(mpi, h.ranges, number[:, None], away)[
        np.searchsorted(away, label[~here]), 0]
    owner = np.repeat(np.arange(mpi.Get_size()), mpi.allgather(len(roots)))
    return component, owner, h.touch[roots]


def gdsw_groups(h: InterfaceHalo, split_ratio: float):
    """GDSW's groups: ``(node, group, weight)`` triples (own interface nodes by local number),
    the rank owning each group and a summary (collective)."""
    component, owner, _ = components(h, split_ratio)
    return (np.arange(len(h.gamma)), component, np.ones(len(component))), owner, \
        {"components": len(owner)}


def rgdsw_groups(h: InterfaceHalo):
    """RGDSW's groups, the coarse nodes (:func:`~.interface.coarse_nodes` on every component's
    touch set, allgathered), as :func:`gdsw_groups` (collective)."""
    component, owner, keys = components(h)
    C = len(owner)
    if not C:  # no interface anywhere (every rank agrees: C is global)
        return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)), owner, \
            {"coarse_nodes": 0, "components": 0}
    keys = np.vstack(h.mpi.allgather(keys))
    coarse, held = coarse_nodes([tuple(int(p) for p in k if p >= 0) for k in keys], h.N)
    member = sp.csr_matrix(held[component]).tocoo()
    count = np.bincount(member.row, minlength=len(component))
    node = member.row.astype(np.int64)
    return (node, member.col.astype(np.int64), 1.0 / np.maximum(count[node], 1)), \
        owner[coarse], {"coarse_nodes": len(coarse), "components": C}


def alltoall_items(mpi, dest: np.ndarray, items: list) -> list:
    """``items[k]`` sent to rank ``dest[k]``; the items received, in rank order (one pickled
    all-to-all: small per-group data)."""
    out = [[] for _ in range(mpi.Get_size())]
    for d, item in zip(dest, items):
        out[int(d)].append(item)
    return [item for got in mpi.alltoall(out) for item in got]


def interface_columns(h: InterfaceHalo, groups, owner: np.ndarray, Z: np.ndarray | None):
    r"""This rank's entries ``(rows, cols, vals)`` of :math:`\Phi_\Gamma` and the number of
    columns, for the ``groups`` owned by the ranks ``owner``: per group an orthonormal basis of
    :math:`W_g Z|_g` by the tall-skinny QR of the
    module docstring (one column of the weights without ``Z``), groups numbered by their
    smallest node, columns group by group (collective)."""
    mpi, bs = h.mpi, h.bs
    node, group, weight = groups
    dofs_of = lambda k: node_dofs(h.lo + h.gamma[node[k]], bs)  # noqa: E731
    mine = label_groups(group)
    if Z is None:
        return (*_entries([dofs_of(k) for k in mine],
                          [np.full(len(k) * bs, group[k[0]]) for k in mine],
                          [np.repeat(weight[k], bs) for k in mine]), len(owner))
    first = lambda k: int(group[k[0]])  # noqa: E731
    blocks = [np.repeat(weight[k], bs)[:, None] * Z[dofs_of(k) - h.lo * bs] for k in mine]
    R = [np.linalg.qr(B, mode="r") if B.shape[0] > B.shape[1] else B for B in blocks]
    got = alltoall_items(mpi, [owner[first(k)] for k in mine],
                    [(first(k), mpi.Get_rank(), r) for k, r in zip(mine, R)])
    by_group: dict[int, list] = {}
    for t in sorted(got, key=lambda t: (t[0], t[1])):
        by_group.setdefault(t[0], []).append(t)
    back, dest, counts = {}, [], {}
    for g, pieces in sorted(by_group.items()):
        _, s, Vt = np.linalg.svd(np.vstack([t[2] for t in pieces]), full_matrices=False)
        keep = s > RTOL * s[0] if len(s) and s[0] > 0 else np.zeros(len(s), dtype=bool)
        back[g] = Vt[keep].T / s[keep]
        counts[g] = int(keep.sum())
        dest += [(t[1], g) for t in pieces]
    base = mpi.exscan(sum(counts.values())) or 0
    offset, at = {}, base
    for g in sorted(counts):
        offset[g], at = at, at + counts[g]
    reply = alltoall_items(mpi, [d for d, _ in dest], [(g, offset[g], back[g]) for _, g in dest])
    T = {g: (o, t) for g, o, t in reply}
    rows, cols, vals = [], [], []
    for k, B in zip(mine, blocks):
        o, t = T[first(k)]
        U = B @ t
        r, c = np.nonzero(U)
        rows.append(dofs_of(k)[r]), cols.append(o + c), vals.append(U[r, c])
    return (*_entries(rows, cols, vals), int(mpi.allreduce(sum(counts.values()))))


def part_holders(mpi, subdomains) -> np.ndarray:
    """The rank holding each of the ``N`` parts (:math:`O(N)`, allgathered; collective)."""
    holder = np.zeros(subdomains.N, dtype=np.int64)
    for r, ids in enumerate(mpi.allgather(np.asarray(subdomains.ids, dtype=np.int64))):
        holder[ids] = r
    return holder


def extension(A, h: InterfaceHalo, subdomains, entries, n0: int):
    r"""The interior entries of :math:`\Phi` on this rank's parts,
    :math:`\Phi_I = -A_{II}^{-1}A_{I\Gamma}\Phi_\Gamma` on :math:`O_i`, from
    :math:`A[O_i, O_i]` and the part's interface rows of :math:`\Phi_\Gamma` (``entries``, each
    rank's own, sent to the part's holder); each part solves only for the columns that touch it.
    Also each part's share of the coarse matrix beyond the interface block,
    :math:`\Phi_\Gamma^T A_{\Gamma I}\Phi_I = -B_i^T X_i` with :math:`B_i = -A_{I\Gamma}
    \Phi_\Gamma` and :math:`X_i = A_{II}^{-1} B_i` (dense, on the touching columns), so that
    :math:`A_0 = \Phi_\Gamma^T A_{\Gamma\Gamma}\Phi_\Gamma - \sum_i B_i^T X_i`, the Schur
    complement's form of :math:`\Phi^TA\Phi`. Returns ``(rows, cols, vals)`` of each
    (collective)."""
    mpi, bs = h.mpi, h.bs
    holder = part_holders(mpi, subdomains)
    rows, cols, vals = entries
    node_part = h.part[rows // bs - h.lo]
    got, _ = exchange(mpi, holder[node_part],
                      np.column_stack([node_part, rows, cols, float_bits(vals)]))
    gamma_part = h.part[h.gamma]
    faces, _ = exchange(mpi, holder[gamma_part],
                        np.column_stack([gamma_part, h.lo + h.gamma.astype(np.int64)]))
    sets = [PETSc.IS().createGeneral(o.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
            for o in subdomains.owned]
    blocks = A.createSubMatrices(sets) if sets else []
    out_r, out_c, out_v, sr, sc, sv = [], [], [], [], [], []
    got, faces = got[np.argsort(got[:, 0], kind="stable")], faces[np.argsort(faces[:, 0])]
    for i, O, M in zip(subdomains.ids, subdomains.owned, blocks):
        on = node_dofs(faces[slice(*np.searchsorted(faces[:, 0], [i, i + 1])), 1], bs)
        interior = np.flatnonzero(~np.isin(O, on))
        mine = got[slice(*np.searchsorted(got[:, 0], [i, i + 1]))]
        if not len(interior) or not len(mine):
            continue
        indptr, indices, values = M.getValuesCSR()
        block = sp.csr_matrix((values, indices, indptr), shape=(len(O), len(O)))
        position = np.searchsorted(O, mine[:, 1])
        Phi_gamma = sp.csr_matrix((bits_float(mine[:, 3]), (position, mine[:, 2])),
                                  shape=(len(O), n0))
        rhs = -(block[interior] @ Phi_gamma).tocsc()
        touching = np.flatnonzero(np.diff(rhs.indptr))
        if not len(touching):
            continue
        solver = SparseSolver(block[interior][:, interior])
        B = rhs[:, touching]  # nonzero on the interior rows next to the interface only
        try:
            X = solver.solve(B.toarray())
        finally:
            solver.destroy()
        r, c = np.nonzero(np.abs(X) > 1e-14 * np.abs(X).max())
        out_r.append(O[interior][r]), out_c.append(touching[c]), out_v.append(X[r, c])
        sr.append(np.repeat(touching, len(touching))), sc.append(np.tile(touching,
                                                                         len(touching)))
        sv.append(-np.asarray(B.T @ X).ravel())
    for o in sets:
        o.destroy()
    for M in blocks:
        M.destroy()
    return _entries(out_r, out_c, out_v), _entries(sr, sc, sv)


def grouped(grouping, Z: np.ndarray | None):
    """The interface values of a GDSW-type grouping for :func:`parallel_vectors`:
    ``grouping(halo) -> (groups, owner, info)`` (:func:`gdsw_groups`, :func:`rgdsw_groups`),
    then :func:`interface_columns` with the near-null space ``Z`` (this rank's rows)."""
    def values(h: InterfaceHalo):
        groups, owner, info = grouping(h)
        r, c, v, n0 = interface_columns(h, groups, owner, Z)
        return (r, c, v), n0, info
    return values


def parallel_vectors(inp: CoarseInput, values) -> tuple[CoarseVectors, dict]:
    """:math:`\\Phi` of a GDSW-type space from each rank's own rows: ``values(halo) ->
    ((rows, cols, vals), n0, info)``, this rank's entries of :math:`\\Phi_\\Gamma` (:func:`grouped`,
    :func:`~.harmonic.parallel_interface_values`), then their extension (collective)."""
    h = InterfaceHalo(inp.A, inp.subdomains, inp.block_size)
    (r, c, v), n0, info = values(h)
    (er, ec, ev), schur = extension(inp.A, h, inp.subdomains, (r, c, v), n0)
    cat = np.concatenate
    return CoarseVectors(cat([r, er]), cat([c, ec]), cat([v, ev]), n0,
                         schur=SchurGalerkin(len(r), schur)), {**info, "n0": n0}
