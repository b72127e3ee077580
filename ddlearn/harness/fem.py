"""Linear elasticity assembled with scikit-fem, handed to PETSc as a user's program would:
P1 (or Q1) vector elements on the unit square or cube, clamped at x = 0, under gravity, Poisson
ratio ``nu`` (default 0.3), Young's modulus 1 with random stiff circular (2D) or spherical (3D)
inclusions of modulus ``contrast`` (or one ball at the centre), evaluated at the quadrature
points. The clamped nodes are removed (scikit-fem numbers the dofs node-wise,
``dim * node + component``, so the block structure survives); :func:`to_petsc` gives a
distributed AIJ matrix in the mesh's node numbering with PETSc's default rows split into whole
nodes, block size ``dim``, and the rigid-body modes as its near-null space.

The program ``examples/elasticity.py`` and the studies (``benchmarks/elasticity.py``,
``benchmarks/scaling.py``, ``benchmarks/time_to_solution.py``) assemble through this module;
scikit-fem comes with the ``bench`` and ``test`` extras.

Subdomains of a user's own (:func:`auxiliary`): the elements are split into N parts (METIS on
the element dual graph, or recursive coordinate bisection of the centroids); a subdomain is a
part plus one layer of the elements that share a node with it, its rows the free dofs of its
elements' nodes (sorted), and its Neumann matrix the stiffness assembled over its elements
only, restricted to those rows. Each rank gets the subdomains most of whose rows it owns
(every rank at least one).

Distributed assembly (:func:`build` with ``assemble=False``, then :func:`to_petsc`): the rank
owning the rows ``lo:hi`` assembles the stiffness and the load over the elements that touch
those rows' nodes only, in chunks of elements, and keeps its rows of ``K_FF`` (``F`` the free
dofs): a row of ``K`` at an owned node is a sum over exactly those elements, the serial row up
to the order of the floating-point sums. PETSc then forms ``A = (K_FF + K_FF^T) / 2``, bitwise
symmetric. A rank holds the mesh (coordinates, connectivity) and its own rows, never the whole
matrix.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ddlearn.decomposition.parallel_partition import balanced_holders
from ddlearn.decomposition.petsc_rows import sequential_aij
from ddlearn.decomposition.serial_partition import metis_partition
from ddlearn.pc import set_auxiliary_matrices, set_coordinates, set_subdomains

try:
    from skfem import (Basis, BilinearForm, Dofs, ElementHex1, ElementQuad1, ElementTetP1,
                       ElementTriP1, ElementVector, LinearForm, MeshHex, MeshQuad, MeshTet,
                       MeshTri, asm)
    from skfem.helpers import ddot, div, sym_grad
except ImportError as e:  # the assembly needs scikit-fem; nothing else in the harness does
    raise ImportError("ddlearn.harness.fem assembles with scikit-fem: install the 'bench' "
                      "extra (pip install 'ddlearn[bench]') or scikit-fem itself") from e

__all__ = ["NU", "ELEMENTS", "CHUNK_POINTS", "Problem", "unit_mesh", "inclusions",
           "youngs_modulus", "build", "touching", "assemble_rows", "rigid_body_modes",
           "to_petsc", "element_parts", "rcb", "overlapping_subdomains", "assign", "auxiliary",
           "attach_auxiliary"]

NU = 0.3
#: the element families: mesh and scalar element per dimension
ELEMENTS = {"p1": ({2: MeshTri, 3: MeshTet}, {2: ElementTriP1, 3: ElementTetP1}),
            "q1": ({2: MeshQuad, 3: MeshHex}, {2: ElementQuad1, 3: ElementHex1})}


def unit_mesh(dim: int, cells: int | None = None, refine: int | None = None,
              element: str = "p1"):
    """The unit square or cube (triangles / tetrahedra for ``p1``, squares / hexahedra for
    ``q1``): ``cells`` per side, or scikit-fem's reference mesh refined ``refine`` times."""
    Mesh = ELEMENTS[element][0][dim]
    if refine is not None:
        return Mesh().refined(refine)
    g = np.linspace(0.0, 1.0, (cells or {2: 32, 3: 8}[dim]) + 1)
    return Mesh.init_tensor(*(g,) * dim)


def inclusions(dim: int, count: int | None = None, seed: int = 0, ball: bool = False):
    """``(centres (K, dim), radii (K,))`` of the random inclusions, or of the one ``ball``
    (radius 0.25 at the centre)."""
    if ball:
        return np.full((1, dim), 0.5), np.array([0.25])
    rng = np.random.default_rng(seed)
    count = count if count is not None else {2: 40, 3: 20}[dim]
    lo, hi = {2: (0.03, 0.07), 3: (0.06, 0.12)}[dim]
    return rng.uniform(0.05, 0.95, (count, dim)), rng.uniform(lo, hi, count)


def youngs_modulus(x: np.ndarray, centres: np.ndarray, radii: np.ndarray,
                   contrast: float) -> np.ndarray:
    """``E`` at the points ``x`` of shape ``(dim, ...)``: ``contrast`` inside an inclusion."""
    inside = np.zeros(x.shape[1:], dtype=bool)
    for c, r in zip(centres, radii):
        d2 = sum((x[k] - c[k]) ** 2 for k in range(x.shape[0]))
        inside |= d2 <= r * r
    return np.where(inside, contrast, 1.0)


@BilinearForm
def _elasticity(u, v, w):
    E, nu = w["E"], w["nu"]
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    return 2.0 * mu * ddot(sym_grad(u), sym_grad(v)) + lam * div(u) * div(v)


@LinearForm
def _gravity(v, w):
    return -1.0 * v[v.shape[0] - 1]


#: quadrature points (elements x points) per assembled chunk: bounds the memory of
#: scikit-fem's basis values (about 2.3 kB per point for a 3D vector Q1 element) and of the
#: chunk's element matrices (4096 Q1 hexahedra at 2 x 2 x 2 points: about 150 MB)
CHUNK_POINTS = 2 ** 15


@dataclass
class Problem:
    """The discrete problem (scipy, full node numbering): assembled on every rank (``K``,
    ``A``, ``b``), or, for a distributed assembly, only its mesh, coefficient and free dofs
    (``K = A = b = None``; :func:`assemble_rows` gives a rank its rows)."""
    dim: int
    mesh: object
    element: object
    centres: np.ndarray
    radii: np.ndarray
    contrast: float
    nu: float
    free: np.ndarray        # free dofs, sorted, in the full numbering
    points: np.ndarray      # coordinates of the free nodes, (free nodes, dim)
    K: sp.csr_matrix | None = None   # stiffness of all dofs (unclamped)
    A: sp.csr_matrix | None = None   # K restricted to the free dofs, symmetrised
    b: np.ndarray | None = None      # load of the free dofs
    intorder: int | None = None      # quadrature order (None: scikit-fem's default)

    @property
    def nodes_free(self) -> np.ndarray:
        return self.free[::self.dim] // self.dim

    @property
    def ndofs(self) -> int:
        """Number of dofs before clamping (``dim`` per mesh node)."""
        return self.dim * self.mesh.p.shape[1]

    @property
    def unknowns(self) -> int:
        """Number of free dofs, the size of ``A``."""
        return len(self.free)

    @cached_property
    def dofs(self) -> Dofs:
        """scikit-fem's dof numbering of the whole mesh, built once: a basis on a few elements
        would otherwise number (and locate) every dof of the mesh again."""
        return Dofs(self.mesh, self.element)

    def _basis(self, elements: np.ndarray | None) -> Basis:
        kwargs = {} if self.intorder is None else {"intorder": self.intorder}
        return Basis(self.mesh, self.element, elements=elements, dofs=self.dofs,
                     disable_doflocs=True, **kwargs)

    def chunks(self, elements: np.ndarray | None = None) -> list[np.ndarray]:
        """``elements`` (all: ``None``) in chunks of at most :data:`CHUNK_POINTS` quadrature
        points."""
        elements = np.arange(self.mesh.t.shape[1]) if elements is None else np.asarray(elements)
        if len(elements) == 0:
            return []
        size = max(1, CHUNK_POINTS // self._basis(elements[:1]).X.shape[1])
        return [elements[i:i + size] for i in range(0, len(elements), size)]

    def stiffness(self, elements: np.ndarray | None = None) -> sp.csr_matrix:
        """The stiffness assembled over ``elements`` only (all elements: ``None``), all dofs,
        chunk by chunk (:meth:`chunks`)."""
        K = sp.csr_matrix((self.ndofs, self.ndofs))
        for chunk in self.chunks(elements):
            basis = self._basis(chunk)
            E = youngs_modulus(np.asarray(basis.global_coordinates()), self.centres,
                               self.radii, self.contrast)
            K = K + asm(_elasticity, basis, E=E, nu=self.nu).tocsr()
        return K.tocsr()

    def load(self, elements: np.ndarray | None = None) -> np.ndarray:
        """The gravity load assembled over ``elements`` only (all: ``None``), all dofs."""
        f = np.zeros(self.ndofs)
        for chunk in self.chunks(elements):
            f += asm(_gravity, self._basis(chunk))
        return f


def build(dim: int = 2, cells: int | None = None, refine: int | None = None,
          contrast: float = 1e6, seed: int = 0, count: int | None = None,
          element: str = "p1", nu: float = NU, ball: bool = False,
          intorder: int | None = None, assemble: bool = True) -> Problem:
    """The clamped elasticity problem, assembled on every rank (the whole mesh), or with
    ``assemble=False`` only its mesh, coefficient and free dofs, for :func:`to_petsc` to
    assemble each rank's own rows (:func:`assemble_rows`)."""
    if element not in ELEMENTS:
        raise ValueError(f"unknown -element {element!r}; choose one of {', '.join(ELEMENTS)}")
    if not 0.0 <= nu < 0.5:
        raise ValueError(f"-nu {nu!r}: the Poisson ratio must lie in [0, 0.5)")
    mesh = unit_mesh(dim, cells, refine, element)
    element_ = ElementVector(ELEMENTS[element][1][dim]())
    centres, radii = inclusions(dim, count, seed, ball)
    # clamped nodes from the coordinates, without a basis on the whole mesh; scikit-fem numbers
    # the dofs node-wise (dim * node + component), so whole nodes are removed
    nodes = np.flatnonzero(~np.isclose(mesh.p[0], 0.0))
    free = (dim * nodes[:, None] + np.arange(dim)).ravel()
    problem = Problem(dim, mesh, element_, centres, radii, contrast, nu, free,
                      mesh.p[:, nodes].T.copy(), intorder=intorder)
    if assemble:
        problem.K = problem.stiffness()
        problem.A = _symmetrised(problem.K[free][:, free])
        problem.b = problem.load()[free]
    return problem


def _symmetrised(A: sp.csr_matrix, At: sp.csr_matrix | None = None) -> sp.csr_matrix:
    """``(A + At) / 2`` (``At`` defaults to ``A.T``), explicit zeros dropped, indices sorted.
    The stiffness is symmetric to round-off only, and a coupling that cancels exactly on one
    side of the diagonal alone (Q1) leaves an asymmetric pattern that fails PETSc's symmetry
    test."""
    A = (0.5 * (A + (A.T if At is None else At))).tocsr()
    A.eliminate_zeros()
    A.sort_indices()
    return A


def touching(problem: Problem, nodes: np.ndarray) -> np.ndarray:
    """The elements (sorted) with a node among ``nodes``."""
    mine = np.zeros(problem.mesh.p.shape[1], dtype=bool)
    mine[nodes] = True
    return np.flatnonzero(mine[problem.mesh.t].any(axis=0))


def assemble_rows(problem: Problem, lo: int, hi: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Rows ``lo:hi`` (free numbering, whole nodes) of the clamped stiffness and of ``b``,
    assembled over the elements touching those rows' nodes only: ``(K[F_o, F], b[lo:hi])``,
    ``F`` the free dofs, ``F_o = F[lo:hi]``, global columns, not symmetrised
    (:func:`to_petsc` forms ``(K_FF + K_FF^T) / 2`` in PETSc).

    Row ``i`` of ``K`` is a sum over the elements containing ``i``'s node, all of them among
    those elements: the serial row, summed in another order. Chunk by chunk
    (:meth:`Problem.chunks`), so that only this rank's rows are ever held."""
    dim, free = problem.dim, problem.free
    if lo % dim or hi % dim:
        raise ValueError(f"rows {lo}:{hi} split a node: give each rank whole nodes "
                         f"(block size {dim})")
    own = free[lo:hi]
    elements = touching(problem, own[::dim] // dim)
    K = sp.csr_matrix((len(own), len(free)))
    for chunk in problem.chunks(elements):
        K = K + problem.stiffness(chunk)[own][:, free]
    K.sort_indices()
    return K, problem.load(elements)[own]


def _aij(rows: sp.csr_matrix, n: int, dim: int, comm) -> PETSc.Mat:
    """The ``n x n`` AIJ matrix of block size ``dim`` whose rows on this rank are ``rows``
    (global columns)."""
    A = PETSc.Mat().create(comm=comm)
    A.setSizes(((rows.shape[0], n), (rows.shape[0], n)))
    A.setType(PETSc.Mat.Type.AIJ)
    A.setBlockSize(dim)
    A.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                           rows.data))
    A.assemble()
    return A


def _symmetrised_rows(rows: sp.csr_matrix, dim: int, comm) -> sp.csr_matrix:
    """This rank's rows of ``(K + K^T) / 2`` from its rows of ``K``: the rows of ``K^T`` come
    from PETSc's transpose, and ``K_ij + K_ji = K_ji + K_ij`` bitwise, so the result is
    symmetric although the ranks owning ``i`` and ``j`` summed ``K_ij`` and ``K_ji`` in
    orders of their own."""
    K = _aij(rows, rows.shape[1], dim, comm)
    T = K.transpose()
    indptr, indices, values = T.getValuesCSR()
    Kt = sp.csr_matrix((values, indices, indptr), shape=rows.shape)
    for o in (K, T):
        o.destroy()
    return _symmetrised(rows, Kt)


def rigid_body_modes(points: np.ndarray) -> np.ndarray:
    """The rigid-body motions of the nodes ``points`` ``(n, dim)``, node-wise dofs, as columns
    ``(n * dim, 3 or 6)``: translations, then rotations."""
    n, dim = points.shape
    Z = []
    for k in range(dim):
        z = np.zeros((n, dim))
        z[:, k] = 1.0
        Z.append(z)
    for i, j in ([(0, 1)] if dim == 2 else [(0, 1), (1, 2), (0, 2)]):
        z = np.zeros((n, dim))
        z[:, i], z[:, j] = -points[:, j], points[:, i]
        Z.append(z)
    return np.stack([z.ravel() for z in Z], axis=1)


def to_petsc(problem: Problem, comm=PETSc.COMM_WORLD, rigid_body_modes: bool = True):
    """``(A, b, coordinates)``: the distributed AIJ matrix (block size ``dim``, PETSc's default
    rows in whole nodes, rigid-body modes as near-null space unless ``rigid_body_modes`` is
    false), the load and the coordinate Vec. For a problem built with ``assemble=False`` each
    rank assembles its own rows (:func:`assemble_rows`)."""
    dim = problem.dim
    n = problem.unknowns
    lo, hi = _node_rows(problem, comm)
    if problem.A is None:
        rows, b_rows = assemble_rows(problem, lo, hi)
        rows = _symmetrised_rows(rows, dim, comm)
    else:
        rows, b_rows = problem.A[lo:hi], problem.b[lo:hi]
    A = _aij(rows, n, dim, comm)
    b, coords = _vectors(A, problem, lo, hi, b_rows, rigid_body_modes)
    # the node of each row, for ddlearn's geometric partitioners
    set_coordinates(A, np.repeat(problem.points[lo // dim:hi // dim], dim, axis=0))
    return A, b, coords


def _node_rows(problem: Problem, comm) -> tuple[int, int]:
    """This rank's rows ``lo:hi``: PETSc's default split of the free dofs, in whole nodes."""
    layout = PETSc.Vec().createMPI((PETSc.DECIDE, problem.unknowns), bsize=problem.dim,
                                   comm=comm)
    lo, hi = layout.getOwnershipRange()
    layout.destroy()
    assert lo % problem.dim == 0 and hi % problem.dim == 0
    return lo, hi


def _vectors(A: PETSc.Mat, problem: Problem, lo: int, hi: int, b_rows: np.ndarray,
             rigid_body_modes: bool):
    """``(b, coordinates)`` of the rows ``lo:hi`` for the assembled ``A``, which is marked
    symmetric and given the rigid-body modes as near-null space (unless ``rigid_body_modes``
    is false)."""
    dim, n = problem.dim, problem.unknowns
    A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    coords = PETSc.Vec().createMPI((hi - lo, n), bsize=dim, comm=A.getComm())
    coords.setArray(problem.points[lo // dim:hi // dim].ravel())
    if rigid_body_modes:
        ns = PETSc.NullSpace().createRigidBody(coords)
        A.setNearNullSpace(ns)
        ns.destroy()
    b = A.createVecLeft()
    b.setArray(b_rows)
    return b, coords


def to_matis(problem: Problem, comm=PETSc.COMM_WORLD, method: str = "metis",
             rigid_body_modes: bool = True):
    """``(A, b, coordinates)`` as :func:`to_petsc`, with ``A`` unassembled (``MATIS``), as a
    domain-decomposition code hands it to PCBDDC or PCHPDDM: the elements split into one part
    per rank (:func:`element_parts`), each rank's local matrix the stiffness over its part's
    elements only on the free dofs of their nodes (its subdomain's Neumann matrix), its
    local-to-global map those dofs in whole nodes (block size ``dim``); the rows of ``A`` and
    ``b`` distributed as :func:`to_petsc`'s."""
    dim, n = problem.dim, problem.unknowns
    lo, hi = _node_rows(problem, comm)
    t = problem.mesh.t
    elements = np.flatnonzero(element_parts(problem, comm.getSize(), method) == comm.getRank())
    reduced = np.full(problem.ndofs, -1)
    reduced[problem.free] = np.arange(n)
    dofs = (dim * np.unique(t[:, elements])[:, None] + np.arange(dim)).ravel()
    dofs = dofs[reduced[dofs] >= 0]
    K = _symmetrised(problem.stiffness(elements)[dofs][:, dofs].tocsr())
    rows = reduced[dofs]
    lgmap = PETSc.LGMap().create((rows[::dim] // dim).astype(PETSc.IntType), bsize=dim,
                                 comm=comm)
    A = PETSc.Mat().createIS([(hi - lo, n), (hi - lo, n)], bsize=dim, lgmapr=lgmap,
                             lgmapc=lgmap, comm=comm)
    local = sequential_aij(K)
    A.setISLocalMat(local)
    A.assemble()
    local.destroy(), lgmap.destroy()
    load = problem.b if problem.b is not None else problem.load()[problem.free]
    b, coords = _vectors(A, problem, lo, hi, load[lo:hi], rigid_body_modes)
    return A, b, coords


def element_parts(problem: Problem, N: int, method: str = "metis") -> np.ndarray:
    """Part of each element: METIS on the dual graph (elements sharing a facet), or recursive
    coordinate bisection of the centroids."""
    t = problem.mesh.t
    nel = t.shape[1]
    if N == 1:
        return np.zeros(nel, dtype=int)
    if method == "rcb":
        return rcb(problem.mesh.p[:, t].mean(axis=1).T, N)
    if method != "metis":
        raise ValueError(f"unknown -aux_partition {method!r}; choose metis or rcb")
    T = _incidence(problem)
    D = (T @ T.T).tocsr()
    D.data = (D.data >= problem.dim).astype(np.int8)  # a shared facet: dim shared nodes
    D.setdiag(0)
    D.eliminate_zeros()
    return metis_partition(D, N)


def rcb(points: np.ndarray, N: int) -> np.ndarray:
    """Recursive coordinate bisection of ``points`` ``(n, dim)`` into ``N`` parts of sizes
    within one of each other: cut the longest side at the quantile ``floor(N/2) / N``."""
    part = np.zeros(len(points), dtype=int)

    def split(idx, first, n):
        if n == 1:
            part[idx] = first
            return
        x = points[idx]
        axis = int(np.argmax(x.max(axis=0) - x.min(axis=0)))
        order = idx[np.argsort(x[:, axis], kind="stable")]
        k = round(len(idx) * (n // 2) / n)
        split(order[:k], first, n // 2)
        split(order[k:], first + n // 2, n - n // 2)

    split(np.arange(len(points)), 0, N)
    return part


def _incidence(problem: Problem) -> sp.csr_matrix:
    t = problem.mesh.t
    nel = t.shape[1]
    return sp.csr_matrix((np.ones(t.size, dtype=np.int32), (np.repeat(np.arange(nel), t.shape[0]),
                          t.T.ravel())), shape=(nel, problem.mesh.p.shape[1]))


def overlapping_subdomains(problem: Problem, part: np.ndarray):
    """For each part: ``(elements, rows)``, the part's elements plus the elements sharing a node
    with them, and the free dofs (reduced numbering, sorted) of those elements' nodes."""
    t, dim = problem.mesh.t, problem.dim
    T = _incidence(problem)
    TT = T.T.tocsr()
    reduced = np.full(problem.ndofs, -1)
    reduced[problem.free] = np.arange(len(problem.free))
    out = []
    for i in range(int(part.max()) + 1):
        nodes = np.unique(t[:, part == i])
        elements = np.unique(TT[nodes].indices)
        dofs = (dim * np.unique(t[:, elements])[:, None] + np.arange(dim)).ravel()
        rows = reduced[dofs]
        out.append((elements, rows[rows >= 0]))
    return out


def assign(rows: list[np.ndarray], ranges: np.ndarray) -> np.ndarray:
    """Rank of each subdomain of global ``rows``: every rank its share, those it owns most rows
    of first (:func:`~ddlearn.decomposition.parallel_partition.balanced_holders`)."""
    size = len(ranges) - 1
    if len(rows) < size:
        raise ValueError(f"{len(rows)} subdomains for {size} ranks: every rank needs one")
    shared = []
    for i, r in enumerate(rows):
        counts = np.bincount(np.searchsorted(ranges, r, side="right") - 1, minlength=size)
        ranks = np.flatnonzero(counts)
        shared.append(np.column_stack([np.full(len(ranks), i), ranks, counts[ranks]]))
    return balanced_holders(np.concatenate(shared), np.diff(ranges), len(rows))


def auxiliary(problem: Problem, A: PETSc.Mat, N: int, method: str = "metis"):
    """This rank's overlapping subdomains (rows) and their Neumann matrices (scipy CSR)."""
    comm = A.getComm().tompi4py()
    ranges = np.asarray(A.getOwnershipRanges())
    subs = overlapping_subdomains(problem, element_parts(problem, N, method))
    owner = assign([r for _, r in subs], ranges)
    sets, mats = [], []
    for i in np.flatnonzero(owner == comm.Get_rank()):
        elements, rows = subs[i]
        dofs = problem.free[rows]
        sets.append(rows.astype(PETSc.IntType))
        mats.append(problem.stiffness(elements)[dofs][:, dofs].tocsr())
    return sets, mats


def attach_auxiliary(A: PETSc.Mat, sets, mats) -> None:
    """Hand the subdomains of :func:`auxiliary` and their Neumann matrices to ddlearn's PC."""
    set_subdomains(A, sets, overlapping=True)
    set_auxiliary_matrices(A, mats)
