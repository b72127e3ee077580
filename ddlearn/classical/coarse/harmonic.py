r"""GDSW enriched by locally A-harmonic traces: a coarse space robust to coefficient jumps that
is built from the assembled matrix alone (elasticity handed over by a C program: the matrix,
its block size and near-null space, no Neumann matrices).

The solution of :math:`Au = f` is, away from the load, *A-harmonic*: near an interface
component :math:`c` it lies in the range of the transfer operator

.. math:: T_c : g \mapsto \bigl(-A_{\omega\omega}^{-1}A_{\omega\partial}\,g\bigr)\big|_c,

which maps Dirichlet data :math:`g` on the boundary :math:`\partial\omega` of an oversampling
region :math:`\omega \supset c` to the trace on :math:`c` of its energy-minimal extension
into :math:`\omega`. Interior decay makes the singular values of :math:`T_c` fall fast, and the
leading left singular vectors are the optimal local approximation space of that dimension
(Babuška–Lipton; the transfer eigenproblem of Heinlein & Smetana's fully algebraic two-level
Schwarz method, which needs only Dirichlet matrices, i.e. rows of :math:`A`). Where a stiff
inclusion or channel crosses :math:`c` its rigid motions do not decay, so they are among the
leading vectors whatever the contrast; GDSW's near-null-space functions alone miss the motions
that are rigid on the inclusion and free in the soft rest.

Per interface component :math:`c` (:mod:`.interface`, split by coefficient as GDSW's):

- the oversampling regions :math:`\omega` (``regions``): by default one per *part* :math:`p`,
  its nodes grown by ``layers`` node layers (the components :math:`c` that touch :math:`p` lie
  within one layer of it, so inside :math:`\omega`), each sampling every component it holds:
  a component gets the traces of each of its parts' regions; or one per *touch set*, the nodes
  of the parts :math:`c` touches grown by ``layers`` layers. One sparse factorisation per
  region: :math:`N` per-part regions against one per face, edge and vertex of the
  decomposition, each of up to eight parts (measured by ``benchmarks/scaling.py``, 3D
  elasticity, 147 852 unknowns, N = 64, 2 ranks: part regions, basis 21.6 s, 70 CG
  iterations; touch-set regions, then factored serially on rank 0, 151 s, 88 iterations;
  GDSW 6.4 s, 159 iterations);
- ``samples`` random Dirichlet data :math:`g \sim \mathcal N(0, \mathrm{diag}(A)^{-1})` on
  :math:`\partial\omega` (the randomised range finder of Buhr & Smetana), traces
  :math:`Y = T_c G`, side by side over the regions that hold :math:`c`;
- interface values: the near-null space restricted to each coefficient piece of :math:`c` (as
  GDSW) and the left singular vectors of :math:`Y` in the :math:`A_{cc}`-norm whose singular
  values exceed ``tol`` times the largest, orthonormalised together;
- extended energy-minimally into the parts (:func:`.interface.energy_minimal_extension`).

A component of one node (a vertex) keeps GDSW's functions. The columns of :math:`\Phi` are
fixed once built, so the preconditioner is a fixed SPD map for CG.

Where the work is done. With part regions (the default) nothing is gathered
(:func:`parallel_interface_values`, on :mod:`.interface_parallel`'s halo, components and
extension): each part's holder grows its part by ``layers`` layers of the matrix's nonzero
couplings (the halo's rows fetched layer by layer), extracts the region's rows of the matrix,
factors and samples it; the traces of a component go to its owner (the rank of its smallest
node) with its rows of the near-null space and its pieces, which forms its columns; each rank's
memory is its own rows and its parts' regions. With touch-set regions (a region spans the parts
of a touch set, held by different ranks) the interface, its components and the regions are
found on rank 0 from the gathered matrix; the regions are spread over the ranks in rounds (each
rank is sent a region's rows of the matrix, factors it, samples it and returns the traces);
rank 0 compresses them, assembles :math:`\Phi_\Gamma` and extends it. Each region draws its
random data from its own stream, seeded by ``seed`` and the region's part (or touch set's
index), so the same matrix and parts give the same :math:`\Phi` on any number of ranks, gathered
or not (to round-off: the kept traces' subspace is as stable as its singular-value gap).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from mpi4py import MPI

from petsc4py import PETSc

from ...decomposition.collective import collective_check, dealt_out, on_root
from ...decomposition.groups import label_groups
from ...decomposition.parallel_partition import (DistributedGraph, bits_float, exchange,
                                                 float_bits, grow_overlap_parallel)
from ...decomposition.subdomains import node_dofs
from ..overlapping import SparseSolver
from .gdsw import GDSW, block_columns
from .interface import (InterfaceCoarseSpace, coefficient_pieces, energy_minimal_extension,
                        interface_components, node_matrix)
from .interface_parallel import (alltoall_items, components, parallel_vectors,
                                 part_holders)
from .nicolaides import orthonormal_columns

__all__ = ["Harmonic", "harmonic_basis", "dominant_traces", "region_traces",
           "component_columns", "parallel_interface_values"]


def dominant_traces(Y: np.ndarray, A_cc: np.ndarray, tol: float) -> np.ndarray:
    r"""The left singular vectors of ``Y`` in the :math:`A_{cc}`-norm whose singular values
    exceed ``tol`` times the largest: with :math:`A_{cc} = LL^T` and
    :math:`L^TY = U\Sigma V^T`, the columns :math:`L^{-T}u_k` with :math:`\sigma_k > \mathrm{tol}\,
    \sigma_1` (:math:`A_{cc}`-orthonormal).

    Raises
    ------
    ValueError
        :math:`A_{cc}` (a diagonal block of the matrix) is not positive definite.
    """
    try:
        L = np.linalg.cholesky(A_cc)
    except np.linalg.LinAlgError:
        raise ValueError("a diagonal block of the matrix on an interface component is not "
                         "positive definite; the harmonic coarse space needs an SPD matrix")
    U, s, _ = np.linalg.svd(L.T @ Y, full_matrices=False)
    k = int(np.sum(s > tol * s[0])) if s.size and s[0] > 0 else 0
    return sla.solve_triangular(L.T, U[:, :k], lower=False)


def component_columns(pieces: np.ndarray, Z_c: np.ndarray | None, bs: int, traces, A_cc,
                      tol: float) -> tuple[np.ndarray, int]:
    r"""``(V, k)``: the interface values of one component, :math:`V = \mathrm{orth}\,[Z|_{c_1},
    \dots, Z|_{c_q}, \mathrm{dominant}(Y)]` with GDSW's functions on each coefficient piece
    :math:`c_j` (``pieces``: each node's piece label; ``Z_c``: the near-null space on the
    component's dofs, ``None``: the constants) and the :func:`dominant_traces` of its sampled
    traces side by side (``traces``: a list of trace blocks, ``None``: not sampled; ``A_cc``:
    returns the dense block :math:`A_{cc}`), and ``k`` the columns the traces gave."""
    V = []
    for p in np.unique(pieces):  # GDSW's, per piece
        mine = np.flatnonzero(pieces == p)
        rows = node_dofs(mine, bs)
        W = orthonormal_columns(np.ones((len(rows), 1)) if Z_c is None else Z_c[rows])
        V.append(np.zeros((len(pieces) * bs, W.shape[1])))
        V[-1][rows] = W
    k = 0
    if traces is not None:
        V.append(dominant_traces(np.hstack(traces), A_cc(), tol))
        k = V[-1].shape[1]
    return orthonormal_columns(np.hstack(V)), k


def _grown(G: sp.csr_matrix, seeds: np.ndarray, steps: int):
    """``(inside, boundary)``: the nodes ``seeds`` grown by ``steps`` layers of the node graph
    ``G`` (sorted), and the nodes next to them (sorted); a breadth-first search that touches
    only the rows it reaches."""
    mask = np.zeros(G.shape[0], dtype=bool)
    mask[seeds] = True
    frontier = np.asarray(seeds)
    for _ in range(steps):
        reached = np.unique(G[frontier].indices)
        frontier = reached[~mask[reached]]
        mask[frontier] = True
    reached = np.unique(G[np.flatnonzero(mask)].indices)
    return np.flatnonzero(mask), reached[~mask[reached]]


@dataclass
class Region:
    """One oversampling region, as sent to the rank that samples it: ``A_OO`` and
    ``A_OB`` (its rows of the matrix, on its dofs and on its boundary's), the scale of the random
    boundary data (:math:`|a_{jj}|^{-1/2}` on the boundary dofs) and the positions in the region
    of each sampled component's dofs. ``key`` seeds its random stream."""

    key: int
    A_OO: sp.csr_matrix
    A_OB: sp.csr_matrix
    scale: np.ndarray
    components: list


def region_traces(region: Region, samples: int, seed: int) -> list[np.ndarray]:
    r"""Each sampled component's traces :math:`U|_c` of the energy-minimal extensions
    :math:`U = -A_{OO}^{-1}A_{O\partial}G` of ``samples`` random Dirichlet data :math:`G`,
    standard normal times ``region.scale``, on the region's boundary."""
    if not region.A_OB.shape[1]:  # the region is the whole domain: nothing to sample
        return [np.zeros((len(c), 0)) for c in region.components]
    rng = np.random.default_rng([seed, region.key])
    g = rng.standard_normal((region.A_OB.shape[1], samples)) * region.scale[:, None]
    solver = SparseSolver(region.A_OO)
    try:
        U = -solver.solve(region.A_OB @ g)
    finally:
        solver.destroy()
    return [U[c] for c in region.components]


#: where the oversampling regions are: one per touch set (its parts, grown), or one per part
#: (the part grown, sampling every component it touches)
REGIONS = ("touch", "part")


class _Plan:
    """The interface, its components (split by coefficient), the GDSW functions' pieces and the
    oversampling regions (``regions``: :data:`REGIONS`), largest first, each with the
    components of more than one node it samples (built on the rank that holds the whole
    matrix)."""

    def __init__(self, A: sp.csr_matrix, part: np.ndarray, bs: int, split_ratio: float,
                 layers: int, sample: bool, regions: str):
        self.n, self.bs = A.shape[0], bs
        self.gamma, component, keys = interface_components(A, part, bs)
        self.regions: list[tuple] = []
        self.touch_sets: dict[tuple, list[int]] = {}
        if not len(self.gamma):
            return
        self.pieces = coefficient_pieces(A, self.gamma, component, bs, split_ratio)
        self.members = label_groups(component, len(keys))
        for c, key in enumerate(keys):
            self.touch_sets.setdefault(tuple(key), []).append(c)
        if not sample:
            return
        G = abs(node_matrix(A, bs)).tocsr()  # the graph: a signed matrix's rows can sum to <= 0
        G.eliminate_zeros()
        node_part = part[::bs]
        part_nodes = label_groups(node_part, int(node_part.max()) + 1)
        groups: dict[tuple, list[int]] = {}  # region's parts -> the components it samples
        for touch, comps in self.touch_sets.items():
            for key in ([touch] if regions == "touch" else [(p,) for p in touch]):
                groups.setdefault(key, []).extend(c for c in comps if len(self.members[c]) > 1)
        for t, (key, sampled) in enumerate(groups.items()):
            if sampled:  # a part's region draws from the part's stream, whoever builds it
                inside, boundary = _grown(G, np.concatenate([part_nodes[p] for p in key]),
                                          layers)
                self.regions.append((key[0] if regions == "part" else t, node_dofs(inside, bs),
                                     node_dofs(boundary, bs), sampled))
        self.regions.sort(key=lambda r: -len(r[1]))

    def region(self, A: sp.csr_matrix, scale: np.ndarray, k: int) -> Region:
        """The ``k``-th region's :class:`Region` (its rows of ``A``)."""
        t, O, B, sampled = self.regions[k]
        A_O = A[O]
        return Region(t, A_O[:, O].tocsr(), A_O[:, B].tocsr(), scale[B],
                      [np.searchsorted(O, self.dofs(c)) for c in sampled])

    def components_of(self, k: int) -> list[int]:
        """The components the ``k``-th region samples."""
        return self.regions[k][3]

    def dofs(self, c: int) -> np.ndarray:
        return node_dofs(self.gamma[self.members[c]], self.bs)  # sorted: gamma and members are

    def interface_values(self, Z, traces: dict, tol: float, A: sp.csr_matrix):
        r"""``(Phi_gamma, info)``: :math:`\Phi` on the interface, GDSW's functions of each
        coefficient piece and the dominant sampled traces (``traces``: component -> the list of
        its traces from each region that samples it; :func:`dominant_traces` of them side by
        side), and a summary."""
        if not len(self.gamma):
            return sp.csr_matrix((self.n, 0)), {"components": 0, "n0": 0, "enriched": 0,
                                                "regions": 0}
        blocks, enriched = [], 0
        for comps in self.touch_sets.values():
            for c in comps:
                dofs = self.dofs(c)
                Zc = None if Z is None else Z[dofs]
                V, k = component_columns(self.pieces[self.members[c]], Zc, self.bs,
                                         traces.get(c), lambda: A[dofs][:, dofs].toarray(), tol)
                enriched += k
                blocks.append((dofs, V))
        Phi_gamma = block_columns(self.n, blocks)
        return Phi_gamma, {"components": sum(map(len, self.touch_sets.values())),
                           "n0": Phi_gamma.shape[1], "enriched": enriched,
                           "regions": len(self.regions)}


def harmonic_basis(A: sp.csr_matrix | None, part: np.ndarray | None, Z: np.ndarray | None = None,
                   block_size: int = 1, split_ratio: float = 100.0, samples: int = 30,
                   layers: int = 3, tol: float = 0.1, seed: int = 0, regions: str = "part",
                   mpi=None):
    r""":math:`\Phi` of the harmonic coarse space (scipy; see the module docstring) and a
    summary: components, columns, how many came from the sampled traces, and the regions.
    ``mpi``: the communicator whose ranks sample the regions and share the energy-minimal
    extension (collective; default this process alone); ``A``, ``part`` and ``Z`` are read on its
    rank 0, which gets the result (``(None, None)`` elsewhere)."""
    mpi = MPI.COMM_SELF if mpi is None else mpi
    rank0 = mpi.Get_rank() == 0
    A = sp.csr_matrix(A) if rank0 else None
    plan = on_root(mpi, lambda: _Plan(A, part, block_size, split_ratio, layers, samples > 0,
                                      regions))
    traces = _sampled_over_ranks(mpi, plan, A, samples, seed)
    Phi_gamma, info = on_root(mpi, lambda: plan.interface_values(Z, traces, tol, A)) or \
        (None, None)
    interface = node_dofs(plan.gamma, plan.bs) if rank0 else None
    Phi = energy_minimal_extension(A, part, interface, Phi_gamma, mpi)
    return Phi, info


def _sampled_over_ranks(mpi, plan: _Plan | None, A, samples: int, seed: int) -> dict:
    """The traces of every region (component -> list of traces) on rank 0, the regions dealt
    out to the ranks in rounds of one each, largest first
    (:func:`~ddlearn.decomposition.collective.dealt_out`; collective)."""
    rank0 = mpi.Get_rank() == 0
    count = mpi.bcast(len(plan.regions) if rank0 else None, root=0)
    scale = 1.0 / np.sqrt(np.abs(A.diagonal())) if rank0 else None
    sampled = dealt_out(mpi, count, lambda k: plan.region(A, scale, k),
                        lambda region: region_traces(region, samples, seed))
    traces = {}
    for k, result in enumerate(sampled or []):
        for c, Y in zip(plan.components_of(k), result):
            traces.setdefault(c, []).append(Y)
    return traces


def _region_traces_parallel(A, h, component, subdomains, samples: int, layers: int,
                            seed: int) -> tuple[list, int]:
    r"""This rank's part regions sampled (each part grown by ``layers`` node layers of the
    matrix's nonzero couplings,
    :func:`~ddlearn.decomposition.parallel_partition.grow_overlap_parallel`;
    :func:`region_traces` with the part's random stream): the items
    ``(component, traces, A_cc)`` for the owners of the components, :math:`A_{cc}` (sparse
    ``(rows, cols, vals)`` on the component's sorted dofs) from the region of the smallest
    part that the component touches only, and the number of regions (collective)."""
    mpi, bs = h.mpi, h.bs
    holder = part_holders(mpi, subdomains)
    # every interface node tells the holder of each part of its touch set: (part, component,
    # node, whether the part is the smallest there)
    r, w = np.nonzero(h.touch >= 0)
    p = h.touch[r, w]
    smallest = np.where(h.touch >= 0, h.touch, np.iinfo(np.int64).max).min(axis=1)
    told, _ = exchange(mpi, holder[p], np.column_stack(
        [p, component[r], h.lo + h.gamma[r].astype(np.int64), p == smallest[r]]))
    told = told[np.lexsort((told[:, 2], told[:, 1], told[:, 0]))]
    plans = []  # (part, its nodes, [(component, nodes, first)])
    for i, O in zip(subdomains.ids, subdomains.owned):
        mine = told[slice(*np.searchsorted(told[:, 0], [i, i + 1]))]
        cuts = np.flatnonzero(np.diff(mine[:, 1])) + 1
        sampled = [(int(g[0, 1]), g[:, 2], bool(g[0, 3])) for g in np.split(mine, cuts)
                   if len(g) > 1]  # a vertex keeps GDSW's functions
        if sampled:
            plans.append((int(i), np.unique(np.asarray(O) // bs), sampled))
    graph = DistributedGraph.from_matrix(A, bs, nonzero=True)
    inside = grow_overlap_parallel(graph, [q[1] for q in plans], layers)
    outer = grow_overlap_parallel(graph, inside, 1)
    sets = [PETSc.IS().createGeneral(node_dofs(o, bs).astype(PETSc.IntType),
                                     comm=PETSc.COMM_SELF) for o in outer]
    empty = not sets  # every rank takes part in PETSc's collective extraction
    if empty:
        sets = [PETSc.IS().createGeneral(np.zeros(0, dtype=PETSc.IntType), comm=PETSc.COMM_SELF)]
    blocks = A.createSubMatrices(sets)
    items = []
    for (i, _, sampled), In, Out, M in zip(plans, inside, outer, [] if empty else blocks):
        indptr, indices, values = M.getValuesCSR()
        full = node_dofs(Out, bs)
        Mb = sp.csr_matrix((values, indices, indptr), shape=(len(full), len(full)))
        O_dofs = node_dofs(In, bs)
        o = np.searchsorted(full, O_dofs)
        b = np.setdiff1d(np.arange(len(full)), o)
        M_O = Mb[o]
        region = Region(i, M_O[:, o].tocsr(), M_O[:, b].tocsr(),
                        1.0 / np.sqrt(np.abs(Mb.diagonal()[b])),
                        [np.searchsorted(O_dofs, node_dofs(nodes, bs)) for _, nodes, _ in
                         sampled])
        for (c, nodes, first), Y in zip(sampled, region_traces(region, samples, seed)):
            A_cc = None
            if first:
                q = np.searchsorted(full, node_dofs(nodes, bs))
                B = Mb[q][:, q].tocoo()
                A_cc = (B.row, B.col, B.data)
            items.append((c, Y, A_cc))
    for M in blocks:
        M.destroy()
    for o in sets:
        o.destroy()
    return items, len(plans)


@dataclass
class _Received:
    """What a component's owner receives for it: per sending rank its nodes, coefficient
    pieces and rows of :math:`Z`; the traces of the regions that sampled it; and its block
    :math:`A_{cc}` (``(rows, cols, vals)``, from the region that holds it)."""
    nodes: list = field(default_factory=list)
    pieces: list = field(default_factory=list)
    Z: list = field(default_factory=list)
    traces: list = field(default_factory=list)
    A_cc: tuple | None = None


def parallel_interface_values(A, h, Z: np.ndarray | None, subdomains, split_ratio: float,
                              samples: int, layers: int, tol: float, seed: int = 0,
                              option: str = "-ddlearn_coarse_space"):
    r"""This rank's entries of the harmonic space's :math:`\Phi_\Gamma` from its own rows
    (part regions only; for :func:`~.interface_parallel.parallel_vectors`): the components
    and their coefficient pieces by label propagation
    (:func:`~.interface_parallel.components`), the part regions sampled on their holders
    (:func:`_region_traces_parallel`),
    and per component its rows of :math:`Z`, its pieces and its traces sent to its owner (the
    rank of its smallest node), which forms :func:`component_columns` and returns the rows to
    their owners. The same :math:`\Phi` as :func:`harmonic_basis` with ``regions="part"``
    (each region draws from its part's stream). Returns ``((rows, cols, vals), n0, info)``
    (collective); a matrix it cannot serve is refused on every rank, naming ``option`` (the
    coarse-space option, with the PC's prefix) and gdsw as the fix."""
    mpi, bs = h.mpi, h.bs
    component, owner, _ = components(h)
    piece = components(h, split_ratio)[0] if split_ratio else component
    nodes = h.lo + h.gamma.astype(np.int64)
    groups = label_groups(component)
    pieces = alltoall_items(mpi, [owner[component[k[0]]] for k in groups], [
        (int(component[k[0]]), nodes[k], piece[k],
         None if Z is None else Z[node_dofs(nodes[k], bs) - h.lo * bs]) for k in groups])
    traced, regions = _region_traces_parallel(A, h, component, subdomains, samples, layers,
                                              seed) if samples else ([], 0)
    got = alltoall_items(mpi, [owner[c] for c, _, _ in traced], traced)
    by_c: dict[int, _Received] = {}
    for c, nodes_r, piece_r, Z_r in pieces:
        mine = by_c.setdefault(c, _Received())
        mine.nodes.append(nodes_r), mine.pieces.append(piece_r), mine.Z.append(Z_r)
    for c, Y, A_cc in got:
        by_c[c].traces.append(Y)
        if A_cc is not None:
            by_c[c].A_cc = A_cc
    columns, error, enriched = {}, None, 0
    try:
        for c in sorted(by_c):
            mine = by_c[c]
            at = np.argsort(np.concatenate(mine.nodes))
            rows = node_dofs(np.concatenate(mine.nodes)[at], bs)
            Zc = None if Z is None else np.concatenate(mine.Z)[(at[:, None] * bs +
                                                                 np.arange(bs)).ravel()]
            m, A_cc = len(rows), mine.A_cc
            dense = lambda: sp.csr_matrix((A_cc[2], (A_cc[0], A_cc[1])),  # noqa: E731
                                          shape=(m, m)).toarray()
            V, k = component_columns(np.concatenate(mine.pieces)[at], Zc, bs,
                                     mine.traces or None, dense, tol)
            columns[c], enriched = (rows, V), enriched + k
    except ValueError as e:
        error = f"the harmonic coarse space cannot be built: {e} (use {option} gdsw)"
    collective_check(mpi, error is None, str(error))
    count = sum(V.shape[1] for _, V in columns.values())
    at = mpi.exscan(count) or 0
    out = []
    for c in sorted(columns):
        rows, V = columns[c]
        r, j = np.nonzero(V)
        out.append(np.column_stack([rows[r], at + j, float_bits(V[r, j])]))
        at += V.shape[1]
    out = np.vstack(out) if out else np.zeros((0, 3), dtype=np.int64)
    mine, _ = exchange(mpi, np.searchsorted(h.ranges, out[:, 0] // bs, side="right") - 1, out)
    n0 = int(mpi.allreduce(count))
    info = {"components": len(owner), "enriched": int(mpi.allreduce(enriched)),
            "regions": int(mpi.allreduce(regions))}
    return (mine[:, 0], mine[:, 1], bits_float(mine[:, 2])), n0, info


def _positive(value, option: str, kind=int, low=1):
    if not (isinstance(value, (int, float)) and kind(value) == value and value >= low):
        raise ValueError(f"{option} must be an integer >= {low}, got {value!r}")
    return kind(value)


class Harmonic(GDSW):
    """GDSW plus the dominant sampled A-harmonic traces (see the module docstring). Options
    under ``-ddlearn_harmonic_``: ``split_ratio`` (GDSW's coefficient pieces, default 100),
    ``regions`` (``part``, the default, or ``touch``), ``samples`` (random Dirichlet data per
    region, default 30), ``layers`` (oversampling, default 3), ``tol`` (relative singular
    value kept, in (0, 1), default 0.1)."""

    name = "harmonic"

    def __init__(self, split_ratio: float = 100.0, samples: int = 30, layers: int = 3,
                 tol: float = 0.1, regions: str = "part"):
        super().__init__(split_ratio)
        self.samples = _positive(samples, "the number of samples", low=0)
        self.layers = _positive(layers, "the number of oversampling layers", low=1)
        self.regions = self._checked_regions(regions, "the oversampling regions")
        self.tol = self._checked_tol(tol, "the relative singular value")

    @staticmethod
    def _checked_regions(regions, option: str) -> str:
        if regions not in REGIONS:
            raise ValueError(f"unknown {option} {regions!r}: choose one of {', '.join(REGIONS)} "
                             f"(a region per touch set or per part)")
        return regions

    @staticmethod
    def _checked_tol(tol, option: str) -> float:
        if not 0.0 < tol < 1.0:
            raise ValueError(f"{option} must lie in (0, 1) (traces kept: singular value above "
                             f"tol times the largest), got {tol!r}")
        return float(tol)

    def set_from_options(self, prefix: str) -> None:
        super().set_from_options(prefix)
        opts, option = self.options(prefix), f"-{prefix}{self.name}_"
        self.samples = _positive(opts.getInt("samples", self.samples), option + "samples", low=0)
        self.layers = _positive(opts.getInt("layers", self.layers), option + "layers", low=1)
        self.regions = self._checked_regions(opts.getString("regions", self.regions),
                                             option + "regions")
        self.tol = self._checked_tol(opts.getReal("tol", self.tol), option + "tol")

    def vectors(self, inp):
        if self.regions == "touch":  # a touch set's region spans ranks: planned on rank 0
            return InterfaceCoarseSpace.vectors(self, inp)
        out, self.found = parallel_vectors(inp, lambda h: parallel_interface_values(
            inp.A, h, inp.null_space, inp.subdomains, self.split_ratio, self.samples,
            self.layers, self.tol, option=f"-{inp.prefix}coarse_space"))
        return out

    def build(self, A, part, Z, block_size, mpi=None):
        return harmonic_basis(A, part, Z, block_size, self.split_ratio, self.samples,
                              self.layers, self.tol, regions=self.regions, mpi=mpi)

    def describe(self) -> dict:
        return {**super().describe(), "samples": self.samples, "layers": self.layers,
                "regions": self.regions,
                "tol": self.tol}
