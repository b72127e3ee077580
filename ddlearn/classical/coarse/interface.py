r"""What GDSW-type coarse spaces share: the interface of the non-overlapping parts, its
components, the energy-minimal extension into the parts, and the serial build on rank 0.

- Interface :math:`\Gamma`: the nodes with a matrix neighbour in another part.
- The *touch set* of an interface node: the parts of the node and of its matrix neighbours.
  Interface components: :math:`\Gamma` split by touch set, then into connected pieces (in 2D
  the edges between two parts and the vertices where three or more meet).
- Coefficient pieces (:func:`coefficient_pieces`, optional): each component split further
  where the stiffness of neighbouring interface nodes jumps, so that a stiff inclusion or
  channel crossing the interface gets its own near-null-space functions.
- Coarse nodes (:func:`coarse_nodes`, RGDSW's): the components whose touch set is maximal.
- Energy-minimal extension of interface values :math:`\Phi_\Gamma`:
  :math:`\Phi_I = -A_{II}^{-1}A_{I\Gamma}\Phi_\Gamma`, :math:`A_{II}` block diagonal over the
  parts (one sparse factorisation each, by the local solves' package:
  :class:`~ddlearn.classical.overlapping.SparseSolver`), the parts' solves dealt out to the
  ranks.

With block size :math:`b > 1` the interface is a set of nodes and every dof of a node belongs to
it. The interface and its values are built here (scipy) from the whole matrix gathered on rank
0, the parts' interior solves on every rank (:func:`on_rank0`): the build of ``harmonic`` and
the reference of GDSW's and RGDSW's gather-free build (:mod:`.interface_parallel`), which the
PC runs.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

from ...decomposition.collective import collective_check, dealt_out
from ...decomposition.groups import label_groups
from ...decomposition.petsc_rows import gather_matrix, scatter_rows
from ...decomposition.subdomains import node_dofs
from ..coarse_space import CoarseInput, CoarseSpace, CoarseVectors
from ..overlapping import SparseSolver

__all__ = ["node_matrix", "interface_nodes", "interface_components", "extension_galerkin",
           "coefficient_pieces", "checked_split_ratio", "coarse_nodes", "node_stiffness",
           "touch_matrix", "touch_incidence", "padded_rows", "energy_minimal_extension",
           "on_rank0", "InterfaceCoarseSpace"]


def node_matrix(A: sp.csr_matrix, bs: int) -> sp.csr_matrix:
    """The node graph of ``A`` (block size ``bs``): entry :math:`(j, k)` the sum of
    :math:`|a|` over the dofs of nodes :math:`j` and :math:`k` (``A`` itself for ``bs`` 1)."""
    if bs == 1:
        return A
    n = A.shape[0]
    C = sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) // bs)), shape=(n, n // bs))
    return (C.T @ abs(A) @ C).tocsr()


def interface_nodes(A: sp.csr_matrix, part: np.ndarray, block_size: int = 1) -> np.ndarray:
    """:math:`\\Gamma`: the nodes (dofs for block size 1) with a matrix neighbour in another
    part (sorted)."""
    A = sp.csr_matrix(A)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    cross = part[A.indices] != part[rows]
    return np.unique(rows[cross] // block_size)


def interface_components(A: sp.csr_matrix, part: np.ndarray, block_size: int = 1):
    """``(gamma, component, keys)``: the interface *nodes*, the component of each, and the
    touch set (sorted tuple of parts) of each component. Nodes are dofs for block size 1."""
    gamma = interface_nodes(A, part, block_size)
    A = node_matrix(sp.csr_matrix(A), block_size)
    touch = touch_matrix(A, part[::block_size], gamma)  # a row: a node's touch set, sorted
    # equal touch sets, found at once: rows padded with -1 to the longest, made unique
    sets, label = np.unique(padded_rows(touch), axis=0, return_inverse=True)
    label = label.ravel()
    G = A[gamma][:, gamma].tocoo()
    same = label[G.row] == label[G.col]
    H = sp.csr_matrix((np.ones(int(same.sum())), (G.row[same], G.col[same])),
                      shape=(len(gamma), len(gamma)))
    _, component = csgraph.connected_components(H, directed=False)
    first = np.unique(component, return_index=True)[1]
    return gamma, component, [tuple(int(p) for p in sets[label[j]] if p >= 0) for j in first]


def node_stiffness(A: sp.csr_matrix, block_size: int = 1) -> np.ndarray:
    r"""The stiffness of each node, :math:`s_j = \sum_{c<b} |a_{bj+c,\,bj+c}|` (the trace of
    its diagonal block): proportional to the coefficient of the elements around node
    :math:`j`, read from the matrix alone."""
    return np.abs(sp.csr_matrix(A).diagonal()).reshape(-1, block_size).sum(axis=1)


def checked_split_ratio(ratio: float, option: str = "the stiffness ratio") -> float:
    """``ratio`` as a float if it splits sensibly (> 1) or not at all (0), else a ValueError
    naming ``option``."""
    if ratio != 0 and not ratio > 1:
        raise ValueError(f"{option} must exceed 1 (the stiffness jump that splits an interface "
                         f"component) or be 0 (no split), got {ratio!r}")
    return float(ratio)


def coefficient_pieces(A: sp.csr_matrix, gamma: np.ndarray, component: np.ndarray,
                       block_size: int = 1, ratio: float = 0.0) -> np.ndarray:
    r"""The interface components split by coefficient: two neighbouring interface nodes
    :math:`j, k` of one component stay together only where their stiffness
    (:func:`node_stiffness`) is within ``ratio`` of each other,
    :math:`\max(s_j,s_k) < \rho\,\min(s_j,s_k)`; the pieces are the connected components of
    what remains. ``ratio`` 0 keeps the components as they are.

    A stiff region (contrast :math:`\gg\rho`) that crosses the interface then owns whole
    pieces, each carrying the near-null space restricted to it, so a rigid motion of the stiff
    region alone, zero on the soft rest of the face, is in the coarse space: without the split
    the only interface functions there are rigid on the whole face, and the rigid motion of the
    inclusion alone costs energy of the order of the contrast. Nodes on the border of the
    stiff region touch stiff elements, so they are stiff (:math:`s_j \ge` the stiff
    coefficient times the smallest element share): the cut falls in the soft material."""
    if checked_split_ratio(ratio) == 0 or not len(gamma):
        return component
    s = node_stiffness(A, block_size)[gamma]
    G = node_matrix(sp.csr_matrix(A), block_size)[gamma][:, gamma].tocoo()
    keep = (component[G.row] == component[G.col]) & \
        (np.maximum(s[G.row], s[G.col]) < ratio * np.minimum(s[G.row], s[G.col]))
    H = sp.csr_matrix((np.ones(int(keep.sum())), (G.row[keep], G.col[keep])),
                      shape=(len(gamma), len(gamma)))
    return csgraph.connected_components(H, directed=False)[1]


def touch_incidence(rows: sp.csr_matrix, neighbour_part: np.ndarray, own_part: np.ndarray,
                    parts: int) -> sp.csr_matrix:
    """The touch sets of interface nodes as an incidence matrix (node x part, 1 on the parts of
    the node and of its neighbours; sorted indices): ``rows`` the nodes' rows of the node graph,
    ``neighbour_part`` the part of each of their entries, ``own_part`` each node's part."""
    own = np.arange(rows.shape[0])
    touch = sp.csr_matrix((np.ones(rows.nnz + len(own)),
                           (np.concatenate([np.repeat(own, np.diff(rows.indptr)), own]),
                            np.concatenate([neighbour_part, own_part]))),
                          shape=(len(own), parts))
    touch.sum_duplicates()
    touch.data[:] = 1.0
    return touch


def touch_matrix(nodes: sp.csr_matrix, node_part: np.ndarray,
                 gamma: np.ndarray) -> sp.csr_matrix:
    """:func:`touch_incidence` of the interface nodes ``gamma``, from the node graph ``nodes``
    (:func:`node_matrix`) and the part of each node."""
    rows = sp.csr_matrix(nodes[gamma])
    return touch_incidence(rows, node_part[rows.indices], node_part[gamma],
                           int(node_part.max()) + 1)


def padded_rows(touch: sp.csr_matrix, width: int | None = None) -> np.ndarray:
    """The column indices of each row of ``touch``, one row each, padded with -1 to ``width``
    (default: the longest row): touch sets that compare as rows."""
    count = np.diff(touch.indptr)
    width = int(count.max(initial=0)) if width is None else width
    out = np.full((touch.shape[0], width), -1, dtype=np.int64)
    out[np.repeat(np.arange(touch.shape[0]), count),
        np.arange(touch.nnz) - np.repeat(touch.indptr[:-1], count)] = touch.indices
    return out


def _sets_matrix(sets, parts: int) -> sp.csr_matrix:
    """The incidence matrix of ``sets`` (tuples of parts): row ``k`` is 1 on set ``k``'s parts."""
    lengths = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
    cols = np.fromiter((p for t in sets for p in t), dtype=np.int64, count=int(lengths.sum()))
    return sp.csr_matrix((np.ones(len(cols)), (np.repeat(np.arange(len(sets)), lengths), cols)),
                         shape=(len(sets), parts))


def coarse_nodes(keys, parts: int) -> tuple[np.ndarray, sp.csr_matrix]:
    r"""The coarse nodes among interface components with touch sets ``keys`` (sorted tuples of
    the ``parts`` parts, one per component): ``(coarse, held)``, the components whose touch set
    is maximal, and the incidence component x coarse node, 1 where the coarse node's touch
    set contains the component's, :math:`T_c \supseteq T_j`."""
    K = _sets_matrix(keys, parts)                        # component x part, 1 on its touch set
    size = np.asarray(K.sum(axis=1)).ravel()
    # T_c is maximal: no other set contains it strictly (|T_c ∩ T_t| = |T_c| < |T_t|)
    meet = (K @ K.T).tocsr()                             # component x component: |T ∩ T'|
    pairs = meet.tocoo()
    inside = (pairs.data == size[pairs.row]) & (size[pairs.col] > size[pairs.row])
    coarse = np.setdiff1d(np.arange(len(keys)), pairs.row[inside])
    hold = meet[:, coarse].tocoo()                       # component x coarse node: |T ∩ T_c|
    keep = hold.data == size[hold.row]
    return coarse, sp.csr_matrix((np.ones(int(keep.sum())), (hold.row[keep], hold.col[keep])),
                                 shape=(len(keys), len(coarse)))


def energy_minimal_extension(A: sp.csr_matrix | None, part: np.ndarray | None,
                             interface: np.ndarray | None, Phi_gamma: sp.csr_matrix | None,
                             mpi=None) -> sp.csr_matrix | None:
    r""":math:`\Phi` with the values ``Phi_gamma`` (shape ``(n, n0)``, nonzero on the interface
    dofs ``interface`` only) on :math:`\Gamma` and :math:`-A_{II}^{-1}A_{I\Gamma}\Phi_\Gamma` in
    each part's interior; each part solves only for the columns that touch it. The parts'
    solves (one sparse factorisation each) are dealt out to the ranks of ``mpi`` in rounds,
    largest part first (:func:`~ddlearn.decomposition.collective.dealt_out`; collective,
    ``None``: this process alone); the arguments are read on its rank 0, which gets
    :math:`\Phi` (``None`` elsewhere)."""
    rank0 = mpi is None or mpi.Get_rank() == 0
    jobs = []  # per part with columns to solve for: (its interior rows, the columns)
    if rank0:
        A = sp.csr_matrix(A)
        interior = np.setdiff1d(np.arange(A.shape[0]), interface)
        rhs = -(A[interior] @ Phi_gamma).tocsr()
        jobs = [(mine, np.unique(rhs[mine].indices)) for mine in label_groups(part[interior])]
        jobs = sorted((j for j in jobs if len(j[1])), key=lambda j: len(j[0]), reverse=True)
    count = len(jobs) if mpi is None else mpi.bcast(len(jobs), root=0)

    def item(k):
        mine, touching = jobs[k]
        rows = interior[mine]
        return A[rows][:, rows], rhs[mine][:, touching]

    def solve(job):
        block, B = job
        solver = SparseSolver(block)
        try:
            X = solver.solve(B.toarray())
        finally:
            solver.destroy()
        r, c = np.nonzero(np.abs(X) > 1e-14 * np.abs(X).max())
        return r, c, X[r, c]

    solved = dealt_out(mpi, count, item, solve)
    if not rank0:
        return None
    G = sp.coo_matrix(Phi_gamma)
    rows, cols, vals = [G.row], [G.col], [G.data]
    for (mine, touching), (r, c, v) in zip(jobs, solved):
        rows.append(interior[mine][r]), cols.append(touching[c]), vals.append(v)
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=Phi_gamma.shape)


def extension_galerkin(A: sp.csr_matrix, Phi: sp.csr_matrix, part: np.ndarray,
                       block_size: int = 1) -> sp.csr_matrix:
    r""":math:`A_0 = \Phi^TA\Phi` of an energy-minimal extension :math:`\Phi`
    (:func:`energy_minimal_extension` of values on the interface :math:`\Gamma` of ``part``):
    its columns are discrete-harmonic in the parts' interiors, :math:`(A\Phi)_I = A_{II}\Phi_I +
    A_{I\Gamma}\Phi_\Gamma = 0`, so only the interface rows contribute,
    :math:`A_0 = \Phi_\Gamma^T(A\Phi)_\Gamma`, symmetrised: a product over the interface rows
    instead of PETSc's PtAP over every row (8.8 s of the harmonic space's set-up for 3D
    elasticity, 147 852 unknowns, N = 64, ``benchmarks/scaling.py``)."""
    G = node_dofs(interface_nodes(A, part, block_size), block_size)
    A0 = (sp.csr_matrix(Phi)[G].T @ (sp.csr_matrix(A)[G] @ Phi)).tocsr()
    return ((A0 + A0.T) * 0.5).tocsr()


def on_rank0(inp: CoarseInput, space: "InterfaceCoarseSpace") -> tuple[CoarseVectors, dict]:
    """Run ``space.build(A, part, Z, block_size, mpi) -> (Phi, info)`` on every rank, with the
    gathered matrix, the parts (:meth:`~ddlearn.decomposition.subdomains.Subdomains.gather_part`)
    and the gathered near-null space (``None``: constants) on rank 0 (``None`` elsewhere), and
    give every rank its rows of :math:`\\Phi` and ``info`` (collective; an error on any rank is
    raised everywhere), with :math:`A_0` from the interface rows alone
    (:func:`extension_galerkin`, on rank 0)."""
    comm = inp.comm
    mpi = comm.tompi4py()
    A0 = gather_matrix(inp.A)
    part = inp.subdomains.gather_part()
    Z = mpi.gather(inp.null_space, root=0)
    Z = np.concatenate(Z) if mpi.Get_rank() == 0 and inp.null_space is not None else None
    Phi, info, error, galerkin = None, None, None, None
    try:
        Phi, info = space.build(A0, part, Z, inp.block_size, mpi)
        if Phi is not None and Phi.shape[1]:
            galerkin = extension_galerkin(A0, Phi, part, inp.block_size)
    except (ValueError, RuntimeError) as e:
        error = f"the {space.name.upper()} coarse space cannot be built: {e}"
    collective_check(comm, error is None, str(error))
    info = mpi.bcast(info, root=0)
    rows = scatter_rows(comm, Phi, np.asarray(inp.A.getOwnershipRanges()))
    out = CoarseVectors.from_rows(rows, inp.A.getOwnershipRange()[0])
    out.galerkin = galerkin
    return out, info


class InterfaceCoarseSpace(CoarseSpace):
    """A GDSW-type family: ``build(A, part, Z, block_size, mpi) -> (Phi, info)``, collective
    over ``mpi`` (``None``: this process alone) with the arguments read and the result given
    on its rank 0 (``(None, None)`` elsewhere), run by :func:`on_rank0` (subclasses set ``name``
    and ``build``)."""

    value_dependent = True

    @staticmethod
    def build(A, part, Z, block_size, mpi=None):  # pragma: no cover - protocol
        raise NotImplementedError

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        out, self.found = on_rank0(inp, self)
        return out
