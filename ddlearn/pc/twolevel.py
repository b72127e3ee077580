r"""Two-level overlapping Schwarz with a pluggable coarse space, for any assembled SPD matrix,
in its own ordering and row distribution:

.. math:: M^{-1} = \sum_i R_i^T A_i^{-1} R_i + \Phi\,(\Phi^TA\Phi)^{-1}\Phi^T

(or the balanced or deflated form of the coarse correction, :mod:`ddlearn.classical.twolevel`).
Select it from the options database (``-<prefix>`` is the PC's options prefix)::

    -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC
    -<prefix>ddlearn_coarse_space NAME[+NAME...]   none, or the registry's families
                                  (ddlearn.pc.registry: hats, nicolaides, gdsw, rgdsw, spectral,
                                  learned, learned_insitu); default hats with coordinates on a
                                  box partition of a scalar problem, nicolaides otherwise
    -<prefix>ddlearn_<name>_...   the family's own options (e.g. -ddlearn_spectral_nev 8,
                                  -ddlearn_spectral_pencil {dirichlet,neumann},
                                  -ddlearn_spectral_partition_of_unity {auto,multiplicity,
                                  boolean,interior},
                                  -ddlearn_learned_model FILE, -ddlearn_learned_insitu_model FILE)
    -<prefix>ddlearn_subdomains N number of subdomains, independent of the ranks (default 4 per rank)
    -<prefix>ddlearn_overlap k    overlap in layers of the matrix graph (default 1)
    -<prefix>ddlearn_partition {boxes,rcb,metis,local,local_metis}
                                  default boxes with coordinates, metis (the graph) without;
                                  local: each rank's rows are one subdomain; local_metis: METIS
                                  on each rank's own rows; all but metis never gather the
                                  graph on one rank (ddlearn.decomposition.partition)
    -<prefix>ddlearn_local_type {basic,restrict}
                                  basic: symmetric, for CG (default); restrict: RAS, GMRES
    -<prefix>ddlearn_coarse_correction {additive,balanced,deflated}   (default additive)
    -<prefix>ddlearn_near_null_space {auto,matrix,rigid_body,constant}   (default auto: the
                                  matrix's MatSetNearNullSpace, else constants per component)
    -<prefix>ddlearn_coarse_ranks P   ranks the coarse problem is distributed over (default 1:
                                  A_0 gathered on one rank, sequential Cholesky); P > 1: ranks
                                  spread evenly from the coarse rank, each subdomain's coarse
                                  functions on one of them, default preonly + PCREDUNDANT (exact)
    -<prefix>ddlearn_coarse_rank R    the coarse rank (P = 1), the first of them (P > 1)
    -<prefix>ddlearn_local_...    the one-level PCASM and its blocks (-..._local_sub_pc_type)
    -<prefix>ddlearn_coarse_...   the coarse KSP on the coarse rank(s) (any PETSc KSP/PC)

Coarse solvers (:mod:`ddlearn.classical.galerkin`). This PETSc has no parallel direct solver
(MUMPS, SuperLU_DIST), so for P > 1 the exact default is ``PCREDUNDANT``: each coarse rank
gathers A_0 and factors it (LU; ``-ddlearn_coarse_redundant_pc_type cholesky`` halves the
factorisation), the same iterations as P = 1; ``-ddlearn_coarse_pc_type telescope`` reduces onto
one rank instead. Inexact but scalable and still a fixed SPD map for CG: ``bjacobi`` (+ ICC or
Cholesky blocks), Chebyshev with ``-ddlearn_coarse_ksp_norm_type none``, or this PC nested, a
three-level method from options alone (PETSc's nested prefixes)::

    -ddlearn_coarse_ranks 2 -ddlearn_coarse_ksp_type preonly -ddlearn_coarse_pc_type python
    -ddlearn_coarse_pc_python_type ddlearn.pc.TwoLevelSchwarzPC
    -ddlearn_coarse_ddlearn_subdomains 8 -ddlearn_coarse_ddlearn_coarse_space nicolaides

On a coarse matrix, which carries its column groups (one per fine subdomain), the nested PC's
subdomains are unions of whole fine subdomains' coarse functions: each coarse rank partitions
the graph of its groups (METIS) into its share of the subdomains;
``-ddlearn_coarse_ddlearn_partition metis`` partitions A_0's rows instead. A coarse KSP that
iterates to a tolerance is not a fixed linear map: with CG the PC refuses it (use preonly, or a
flexible outer method: fcg, fgmres, gcr).

What a PETSc user hands a DD preconditioner (:mod:`ddlearn.pc.inputs`: coordinates, their own
subdomains, their local Neumann matrices; on the matrix: the block size and the near-null
space) is used where given; otherwise the PC derives the subdomains itself
(:class:`~ddlearn.decomposition.partition.Subdomains`).

Symmetry: the PC refuses a nonsymmetric matrix or a nonsymmetric form (``restrict``,
``deflated``) when the options database asks CG, CR or MINRES of its prefix. A PC cannot see a
KSP type set in code (``ksp.setType("cg")``): call :func:`~ddlearn.classical.krylov.check_symmetric_pc`
(``ddlearn.pc.check_symmetric_pc``) on the KSP after configuring it.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI
from petsc4py import PETSc

from ..classical.coarse_space import CoarseInput, CoarseSpace, Composite, coarse_basis
from ..classical.krylov import check_symmetric, require_symmetric_pc
from ..classical.timing import Stopwatch
from ..classical.twolevel import CORRECTIONS, TwoLevelSchwarz
from ..decomposition.collective import collective_check
from ..decomposition.layout import column_groups, sequential_aij
from ..decomposition.nullspace import near_null_space
from ..decomposition.partition import PARTITIONERS, Subdomains, metis_partition
from .inputs import get_coordinates, set_coordinates, user_auxiliary, user_subdomains
from .registry import make_coarse_space

__all__ = ["TwoLevelSchwarzPC", "TwoLevel", "two_level"]

LOCAL_TYPES = ("basic", "restrict")


class TwoLevelSchwarzPC:
    """petsc4py Python PC context: two-level Schwarz with a pluggable coarse space on the
    user's own matrix; see the module docstring for the options.

    The constructor's arguments are the defaults that the options database may override;
    ``coarse_space`` is a registry name (``"hats+spectral"``) or a
    :class:`~ddlearn.classical.coarse_space.CoarseSpace` (``Hats() + Spectral(nev=8)``).
    Re-setup follows PETSc: new values in the same matrix refactor the local blocks and the
    coarse matrix, rebuild a value-dependent coarse basis and keep the partition and overlap;
    another matrix (or a new nonzero structure) rebuilds everything;
    ``KSPSetReusePreconditioner`` skips both.

    :attr:`timing`: the set-up split (slowest rank; ``partition_s``, ``basis_s``, and
    :class:`~ddlearn.classical.twolevel.TwoLevelSchwarz`'s ``local_s``, ``coarse_product_s``,
    ``coarse_setup_s``, ``coarse_s``) and this rank's applies since the set-up (``applies``,
    ``apply_local_s``, ``apply_coarse_s``), kept after :meth:`reset` and ``destroy`` until the
    next set-up; :attr:`meta`: what was built (``n0``,
    ``coarse_ranks``, ``coarse_solver``, the coarse space's summary).
    """

    def __init__(self, coarse_space: str | CoarseSpace | None = None,
                 subdomains: int | None = None, overlap: int = 1, partition: str | None = None,
                 local_type: str = "basic", coarse_rank: int = 0,
                 correction: str = "additive", near_null_space: str = "auto",
                 coarse_ranks: int = 1):
        self.coarse_space, self.N, self.overlap = coarse_space, subdomains, overlap
        self.partition, self.local_type, self.coarse_rank = partition, local_type, coarse_rank
        self.correction, self.near_null_space = correction, near_null_space
        self.coarse_ranks = coarse_ranks
        self.space: CoarseSpace | None = None
        self.two_level = self.subdomains = self.Phi = self._input = None
        self._setup_s: dict = {}
        self.meta: dict = {}

    @property
    def symmetric(self) -> bool:
        """Symmetric settings and, once set up, a coarse solve that is a fixed linear map."""
        return self.local_type == "basic" and CORRECTIONS.get(self.correction, True) and \
            (self.two_level is None or self.two_level.symmetric)

    @property
    def timing(self) -> dict:
        """The set-up split and this rank's apply split (see the class docstring)."""
        return {**self._setup_s, **(self.two_level.timing if self.two_level else {})}

    def _summary(self) -> dict:
        """What the PC built (kept as :attr:`meta` after the set-up): the coarse space's name,
        ``n0`` and each family's summary under its name."""
        coarse = self.two_level.coarse
        out = {"coarse_space": self.space.name if self.space else "none",
               "correction": self.correction,
               "n0": self.Phi.getSize()[1] if self.Phi is not None else 0,
               "coarse_ranks": list(coarse.ranks) if coarse else [],
               "coarse_solver": coarse.solver if coarse else ""}
        parts = self.space.parts if isinstance(self.space, Composite) else \
            [self.space] if self.space else []
        for p in parts:
            out[p.name] = p.describe()
            out.update(getattr(p, "meta", {}))
        return out

    def setFromOptions(self, pc: PETSc.PC) -> None:
        opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_")
        # petsc4py treats a default of None as "required": '' and 0 stand for "not given"
        name = opts.getString("coarse_space", "")
        if name:
            self.coarse_space = name
        self.N = opts.getInt("subdomains", self.N or 0) or None
        self.overlap = opts.getInt("overlap", self.overlap)
        self.partition = opts.getString("partition", self.partition or "") or None
        self.local_type = opts.getString("local_type", self.local_type)
        self.coarse_rank = opts.getInt("coarse_rank", self.coarse_rank)
        self.coarse_ranks = opts.getInt("coarse_ranks", self.coarse_ranks)
        self.correction = opts.getString("coarse_correction", self.correction)
        self.near_null_space = opts.getString("near_null_space", self.near_null_space)

    def _check_settings(self, comm, prefix: str) -> None:
        for ok, what, value, choices in (
                (self.local_type in LOCAL_TYPES, "local_type", self.local_type, LOCAL_TYPES),
                (self.correction in CORRECTIONS, "coarse_correction", self.correction,
                 CORRECTIONS),
                (self.partition is None or self.partition in PARTITIONERS, "partition",
                 self.partition, PARTITIONERS)):
            collective_check(comm, ok, f"unknown -ddlearn_{what} {value!r}; choose one of "
                             f"{', '.join(choices)}")
        collective_check(comm, 0 <= self.coarse_rank < comm.getSize(),
                         f"-{prefix}coarse_rank {self.coarse_rank} is not a rank of this "
                         f"{comm.getSize()}-rank communicator")
        collective_check(comm, 1 <= self.coarse_ranks <= comm.getSize(),
                         f"-{prefix}coarse_ranks {self.coarse_ranks}: the coarse problem is "
                         f"distributed over 1 to {comm.getSize()} ranks (this communicator's "
                         f"size); use -{prefix}coarse_ranks 1 (one coarse rank, the default) up "
                         f"to {comm.getSize()}")

    def _resolve_space(self, comm, has_coords: bool, block_size: int, user_sets: bool):
        spec = self.coarse_space
        if spec is None:
            boxes = has_coords and block_size == 1 and not user_sets and \
                self.partition in (None, "boxes")
            spec = "hats" if boxes else "nicolaides"
        if isinstance(spec, CoarseSpace):
            return spec
        try:
            space, error = make_coarse_space(spec), None
        except ValueError as e:
            space, error = None, str(e)
        collective_check(comm, error is None, str(error))
        return space

    def setUp(self, pc: PETSc.PC) -> None:
        comm = pc.getComm()
        prefix = (pc.getOptionsPrefix() or "") + "ddlearn_"
        _, P = pc.getOperators()
        rows, cols = P.getSize()
        collective_check(comm, rows == cols, f"the matrix is {rows} x {cols}: two-level Schwarz "
                         f"needs a square (SPD) matrix")
        self._check_settings(comm, prefix)
        require_symmetric_pc(pc, self.symmetric, "-ddlearn_local_type basic with an additive or "
                             "balanced -ddlearn_coarse_correction")
        if self.two_level is not None and self.two_level.same_structure(P):
            clock = Stopwatch(comm)
            if self.space is not None and self.space.value_dependent:
                self.two_level.set_coarse_basis(None)
                self.Phi.destroy()
                self.Phi = self._basis()
                self.two_level.set_coarse_basis(self.Phi)
            self._setup_s = {"partition_s": 0.0, "basis_s": clock.lap()}
            self.two_level.setUp(pc)  # same structure: values only (see TwoLevelSchwarz)
            self.meta = self._summary()
            return
        self.reset(pc)
        clock = Stopwatch(comm)
        mpi = comm.tompi4py()
        coords = get_coordinates(pc, P)
        has = mpi.allreduce(coords is not None, op=MPI.LOR)
        bs = P.getBlockSize()
        user = user_subdomains(pc, P)
        collective_check(comm, len({s is None for s in mpi.allgather(user)}) == 1,
                         "subdomains were set on some ranks only: call ddlearn.pc.set_subdomains "
                         "on every rank")
        space = self.space = self._resolve_space(comm, has, bs, user is not None)
        if space is not None:
            space.set_from_options(prefix)
        check_symmetric(P, _ksp_type(pc))
        wanted = space.partitioner if space is not None else None
        if space is not None:
            collective_check(comm, space.supports_blocks or bs == 1,
                             f"the {space.name} coarse space serves scalar problems only, and "
                             f"this matrix has block size {bs}: use nicolaides, gdsw, rgdsw or "
                             f"spectral (they use the near-null space)")
            collective_check(comm, wanted is None or (has and self.partition in (None, wanted)
                                                      and user is None),
                             f"the {space.name} coarse space lives on a {wanted} partition: it "
                             f"needs coordinates and -ddlearn_partition {wanted}"
                             f"{', not the given subdomains' if user else ''} (or use "
                             f"-ddlearn_coarse_space nicolaides, which needs the graph alone)")
        own = space.subdomains(P) if space is not None else None
        groups = column_groups(P)
        N = self.N or 4 * comm.getSize()
        if own is None and user is None and self.partition != "local":
            collective_check(comm, 1 <= N <= rows // bs,
                             f"-{prefix}subdomains {N} is not between 1 and the number of "
                             f"{'nodes' if bs > 1 else 'rows'} {rows // bs} of this "
                             f"{'coarse ' if groups is not None else ''}matrix: use "
                             f"-{prefix}subdomains {rows // bs} or fewer")
        if own is not None:
            self.subdomains = own
        elif user is not None:
            self.subdomains = Subdomains.from_sets(P, user[0], user[1], self.overlap,
                                                   self.coarse_rank, bs)
        elif groups is not None and self.partition is None and wanted is None:
            self.subdomains = Subdomains.from_sets(
                P, _grouped_parts(P, groups, N, prefix), False, self.overlap, self.coarse_rank,
                bs, "groups")
        else:
            self.subdomains = Subdomains.from_matrix(
                P, N, self.overlap, coords if has else None, self.partition or wanted,
                self.coarse_rank, bs)
        self._setup_s = {"partition_s": clock.lap()}
        self._input = CoarseInput(P, self.subdomains, prefix, coords if has else None,
                                  near_null_space(P, self.near_null_space, coords, bs),
                                  user_auxiliary(pc, P, self.subdomains), bs)
        if space is not None:
            self.Phi = self._basis()
        self._setup_s["basis_s"] = clock.lap()
        self.two_level = TwoLevelSchwarz(self.subdomains, self.Phi, self.local_type, "ddlearn_",
                                         self.correction)
        self.two_level.setUp(pc)
        # known only now: whether the coarse KSP the options chose is a fixed linear map
        require_symmetric_pc(pc, self.symmetric,
                             f"a coarse solve that is a fixed linear map (-{prefix}coarse_ksp_"
                             f"type preonly, or chebyshev with -{prefix}coarse_ksp_norm_type "
                             f"none); a coarse KSP iterating to a tolerance needs a flexible "
                             f"outer method: -ksp_type fcg, fgmres or gcr")
        self.meta = self._summary()

    def _basis(self) -> PETSc.Mat:
        vectors = self.space.vectors(self._input)
        prefix = self._input.prefix
        # n_0 = 0 (e.g. GDSW on one subdomain: no interface) leaves one level on one rank
        collective_check(self._input.comm, vectors.n0 == 0 or self.coarse_ranks <= vectors.n0,
                         f"-{prefix}coarse_ranks {self.coarse_ranks} is more than the n_0 = "
                         f"{vectors.n0} coarse functions of -{prefix}coarse_space "
                         f"{self.space.name}: use -{prefix}coarse_ranks {max(vectors.n0, 1)} "
                         f"or fewer")
        return coarse_basis(self._input, vectors, self.coarse_rank,
                            self.coarse_ranks if vectors.n0 else 1)

    # -- PC protocol ----------------------------------------------------------------------
    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.apply(pc, x, y)

    def applyTranspose(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.applyTranspose(pc, x, y)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        if self.two_level is None:
            viewer.printfASCII("  ddlearn two-level Schwarz: not set up\n")
            return
        s = self.subdomains
        viewer.printfASCII(f"  ddlearn two-level Schwarz: coarse space "
                           f"{self.space.name if self.space else 'none'}, partition "
                           f"{s.partitioner}, block size {s.block_size}, subdomain sizes "
                           f"{int(s.sizes.min())}..{int(s.sizes.max())}\n")
        if self.space is not None:
            self.space.view(viewer)
        self.two_level.view(pc, viewer)

    def reset(self, pc: PETSc.PC) -> None:
        if self.two_level is not None:
            self._setup_s = self.timing  # the last set-up's record outlives its objects
            self.two_level.reset(pc)
        if self.Phi is not None:
            self.Phi.destroy()
        self.two_level = self.subdomains = self.Phi = self._input = None

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in garbage-collection order.
        self.reset(pc)


def _grouped_parts(A: PETSc.Mat, breaks: np.ndarray, N: int, prefix: str) -> list:
    r"""``N`` non-overlapping parts of a coarse matrix made of whole column groups (one per fine
    subdomain, ``breaks`` their offsets): each rank splits the groups in its rows (cut at its
    ownership range where a group crosses it) into its share of the ``N`` parts, proportional
    to its number of groups, by METIS on the groups' graph
    :math:`G = S^T|A_{rr}|S` (:math:`S`: row-to-group incidence, :math:`A_{rr}` this rank's
    diagonal block). Local: no gather; the parts are unions of neighbouring fine subdomains'
    coarse functions. Collective (the shares); errors on every rank."""
    comm = A.getComm()
    lo, hi = A.getOwnershipRange()
    cuts = np.unique(np.concatenate([[lo, hi], breaks[(breaks > lo) & (breaks < hi)]]))
    mine = len(cuts) - 1 if hi > lo else 0
    counts = np.array(comm.tompi4py().allgather(mine))
    total = int(counts.sum())
    collective_check(comm, comm.getSize() <= N <= total,
                     f"-{prefix}subdomains {N}: this coarse matrix has {total} groups of coarse "
                     f"functions (one per fine subdomain) on {comm.getSize()} ranks, so use "
                     f"-{prefix}subdomains between {comm.getSize()} and {total}, or "
                     f"-{prefix}partition metis to cut its rows instead")
    shares = np.ones(len(counts), dtype=np.int64)
    for _ in range(N - len(counts)):  # the next part to the rank with most groups per part
        room = np.where(shares < counts, counts / shares, -1.0)
        shares[int(np.argmax(room))] += 1
    share = int(shares[comm.getRank()])
    indptr, indices, values = A.getValuesCSR()
    local = (indices >= lo) & (indices < hi)
    row_of = np.repeat(np.arange(hi - lo), np.diff(indptr))
    group = np.searchsorted(cuts, np.arange(lo, hi), side="right") - 1
    S = sp.csr_matrix((np.ones(hi - lo), (np.arange(hi - lo), group)), shape=(hi - lo, mine))
    B = sp.csr_matrix((np.abs(values[local]), (row_of[local], indices[local] - lo)),
                      shape=(hi - lo, hi - lo))
    G = sp.csr_matrix(S.T @ B @ S)
    G.setdiag(0)
    G.eliminate_zeros()
    G = ((G + G.T) != 0).astype(np.int8).tocsr()
    part = np.arange(mine) if share == mine else metis_partition(G, share)
    return [np.arange(lo, hi)[part[group] == k] for k in range(share) if np.any(part == k)]


def _ksp_type(pc: PETSc.PC) -> str | None:
    """The Krylov method the options database asks of the PC's prefix, if any."""
    return PETSc.Options(pc.getOptionsPrefix() or "").getString("ksp_type", "") or None


class TwoLevel:
    """The PyAMG-style handle: a set-up :class:`TwoLevelSchwarzPC` on a matrix, usable as a
    PETSc PC (:attr:`pc`) or a scipy operator (:meth:`aspreconditioner`). Build it with
    :func:`two_level`."""

    def __init__(self, pc: PETSc.PC, A: PETSc.Mat, owns_matrix: bool):
        self.pc, self.A, self._owns = pc, A, owns_matrix

    @property
    def context(self) -> TwoLevelSchwarzPC:
        return self.pc.getPythonContext()

    def aspreconditioner(self) -> spla.LinearOperator:
        """:math:`M^{-1}` as a scipy ``LinearOperator`` (serial matrices)."""
        x, y = self.A.createVecs()
        n = self.A.getSize()[0]

        def matvec(v):
            x.setArray(np.asarray(v, dtype=np.float64).ravel())
            self.pc.apply(x, y)
            return y.getArray(readonly=True).copy()

        return spla.LinearOperator((n, n), matvec=matvec, rmatvec=matvec if
                                   self.context.symmetric else None, dtype=np.float64)

    def destroy(self) -> None:
        """Release the PC (and the PETSc copy of a scipy matrix); collective."""
        self.pc.destroy()
        if self._owns:
            self.A.destroy()


def two_level(A, coarse_space: str | None = None, subdomains: int | None = None,
              overlap: int = 1, coordinates: np.ndarray | None = None, prefix: str = "",
              **kwargs) -> TwoLevel:
    r"""Two-level Schwarz for ``A`` in one call: a scipy sparse matrix (serial) or a PETSc
    ``Mat`` (any communicator; ``coordinates`` then are this rank's rows'). Options under
    ``prefix`` override the arguments. Returns a :class:`TwoLevel`.

    >>> M = two_level(A, "nicolaides", subdomains=16).aspreconditioner()
    >>> x, info = scipy.sparse.linalg.cg(A, b, M=M)
    """
    owns = sp.issparse(A)
    if owns:
        A = sequential_aij(A)
    pc = PETSc.PC().create(comm=A.getComm())
    pc.setOptionsPrefix(prefix)
    pc.setOperators(A, A)
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarzPC(coarse_space, subdomains, overlap, **kwargs))
    if coordinates is not None:
        set_coordinates(pc, coordinates)
    pc.setFromOptions()
    pc.setUp()
    return TwoLevel(pc, A, owns)
