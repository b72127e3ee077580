r"""Two-level overlapping Schwarz with a pluggable coarse space, for any assembled SPD matrix,
in its own ordering and row distribution:

.. math:: M^{-1} = \sum_i R_i^T A_i^{-1} R_i + \Phi\,(\Phi^TA\Phi)^{-1}\Phi^T

(or the balanced or deflated form of the coarse correction, :mod:`ddlearn.classical.twolevel`).
Select it from the options database::

    -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC
    -<prefix>ddlearn_coarse_space NAME[+NAME...] -<prefix>ddlearn_subdomains N ...

(``-<prefix>``: the PC's prefix) with the options of :class:`~ddlearn.pc.settings.Settings`,
a family's own ``-<prefix>ddlearn_<family>_...``, the one-level PCASM's
``-<prefix>ddlearn_local_...`` and the coarse KSP's ``-<prefix>ddlearn_coarse_...``.

The coarse solve (:mod:`ddlearn.classical.galerkin`) is any fixed linear map on the coarse
rank(s), e.g. this PC nested, a three-level method from options alone (PETSc's nested
prefixes)::

    -ddlearn_coarse_ranks 2 -ddlearn_coarse_ksp_type preonly -ddlearn_coarse_pc_type python
    -ddlearn_coarse_pc_python_type ddlearn.pc.TwoLevelSchwarzPC
    -ddlearn_coarse_ddlearn_subdomains 8 -ddlearn_coarse_ddlearn_coarse_space nicolaides

The nested PC partitions the coarse matrix along its column groups (the ``groups``
partitioner, :mod:`ddlearn.decomposition.partition`) and names its options with its own prefix
(``-ddlearn_coarse_ddlearn_subdomains``) in every message.

What a PETSc user hands a DD preconditioner (:mod:`ddlearn.pc.inputs`; on the matrix: the
block size and the near-null space) is used where given; otherwise the PC partitions itself.

Symmetry: the PC refuses a nonsymmetric matrix or a nonsymmetric form (``restrict``,
``deflated``) when the options database asks CG, CR or MINRES of its prefix. A PC cannot see a
KSP type set in code (``ksp.setType("cg")``): call :func:`~ddlearn.classical.krylov.check_symmetric_pc`
(``ddlearn.pc.check_symmetric_pc``) on the KSP after configuring it.
"""
from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI
from petsc4py import PETSc

from ..classical.coarse_space import CoarseInput, CoarseSpace, Composite, coarse_basis
from ..classical.krylov import check_symmetric, options_ksp_type, require_symmetric_pc
from ..classical.overlapping import is_symmetric
from ..classical.splitting import subdomain_neumann
from ..classical.twolevel import TwoLevelSchwarz
from ..decomposition.collective import collective_check
from ..decomposition.petsc_rows import check_stored, sequential_aij
from ..decomposition.nullspace import near_null_space
from ..decomposition.subdomains import Subdomains
from ..decomposition.timing import Timer
from .inputs import get_coordinates, set_coordinates, user_auxiliary, user_subdomains
from .settings import Settings
from .unassembled import check_unassembled, is_unassembled, local_neumann, neumann_on

__all__ = ["TwoLevelSchwarzPC", "TwoLevel", "two_level"]


class TwoLevelSchwarzPC(TwoLevelSchwarz):
    """petsc4py Python PC context: two-level Schwarz with a pluggable coarse space on the
    user's own matrix; see the module docstring for the options.

    The constructor's arguments are the defaults that the options database may override
    (:class:`~ddlearn.pc.settings.Settings`); ``coarse_space`` is a registry name
    (``"hats+spectral"``) or a :class:`~ddlearn.classical.coarse_space.CoarseSpace`
    (``Hats() + Spectral(nev=8)``).

    Life cycle: that of :class:`~ddlearn.classical.twolevel.TwoLevelSchwarz` (PETSc's re-setup
    semantics, decided once there), which this class extends in two places only:
    :meth:`initialize` builds the *structure* first (partition, overlap, index sets, the coarse
    space's inputs), and :meth:`coarse_basis` builds the basis once, or again on every update
    when it depends on the values. A set-up for new values in the same matrix is an update;
    another matrix (or a new nonzero structure) an initialize.

    :attr:`timing`: the set-up split (slowest rank; ``partition_s``, ``basis_s``, and
    :class:`~ddlearn.classical.twolevel.TwoLevelOperator`'s ``local_s``, ``coarse_product_s``,
    ``coarse_setup_s``, ``coarse_s``) and this rank's applies since the set-up (``applies``,
    ``apply_local_s``, ``apply_coarse_s``), kept after :meth:`reset` and ``destroy`` until the
    next set-up; :attr:`meta`: what was built (``n0``, ``coarse_ranks``, ``coarse_solver``, the
    coarse space's summary).
    """

    def __init__(self, coarse_space: str | CoarseSpace | None = None,
                 subdomains: int | None = None, overlap: int = 1, partition: str | None = None,
                 local_type: str = "basic", coarse_rank: int = 0,
                 correction: str | None = None, near_null_space: str = "auto",
                 coarse_ranks: int = 1, local_solver: str = "auto"):
        # the operator's form comes from the settings, checked with the options at set-up
        super().__init__(None, None, prefix="ddlearn_")
        self.settings = Settings(coarse_space, subdomains, overlap, partition, local_type,
                                 coarse_rank, correction, near_null_space, coarse_ranks,
                                 local_solver)
        self.space: CoarseSpace | None = None
        self._input = None
        self._from_level_above = False
        self._setup_s: dict = {}
        self.meta: dict = {}

    @property
    def symmetric(self) -> bool:
        """Symmetric settings and, once set up, a coarse solve that is a fixed linear map."""
        return self.settings.symmetric and (self.two_level is None or self.two_level.symmetric)

    @property
    def needs_splitting(self) -> bool:
        """Whether this PC, as the coarse solver of a level above, wants that level's Neumann
        matrices projected onto its matrix (:mod:`~ddlearn.classical.splitting`): a coarse space
        built from Neumann matrices (``spectral``), the multilevel GenEO construction."""
        return self.settings.uses_neumann

    @property
    def timing(self) -> dict:
        """The set-up split and this rank's apply split (see the class docstring)."""
        return {**self._setup_s, **super().timing}

    def setFromOptions(self, pc: PETSc.PC) -> None:
        self.settings.read(_prefix(pc))

    def setUp(self, pc: PETSc.PC) -> None:
        """The checks of the matrix and the settings, the set-up
        (:meth:`TwoLevelSchwarz.setUp`: initialize or update), the check of the coarse solve
        it chose (collective)."""
        comm, prefix = pc.getComm(), _prefix(pc)
        _, P = pc.getOperators()
        check_stored(P)  # before anything asks a matrix-free P for its entries
        rows, cols = P.getSize()
        collective_check(comm, rows == cols, f"the matrix is {rows} x {cols}: two-level Schwarz "
                         f"needs a square (SPD) matrix")
        self.settings.check(comm, prefix)
        require_symmetric_pc(pc, self.settings.symmetric, f"-{prefix}local_type basic with an "
                             f"additive or balanced -{prefix}coarse_correction")
        self._setup_s = {"partition_s": 0.0, "basis_s": 0.0}
        super().setUp(pc)
        # known only now: whether the coarse KSP the options chose is a fixed linear map
        require_symmetric_pc(pc, self.symmetric,
                             f"a coarse solve that is a fixed linear map (-{prefix}coarse_ksp_"
                             f"type preonly, or chebyshev with -{prefix}coarse_ksp_norm_type "
                             f"none); a coarse KSP iterating to a tolerance needs a flexible "
                             f"outer method: -ksp_type fcg, fgmres or gcr")
        self.meta = self._summary()

    def initialize(self, pc: PETSc.PC, P: PETSc.Mat) -> None:
        """The structure for ``P`` (collective): the coarse space's family, the subdomains
        (partition and overlap), the coarse space's inputs; then the operator
        (:meth:`TwoLevelSchwarz.initialize`, which builds the basis in :meth:`coarse_basis`)."""
        comm, prefix, s = pc.getComm(), _prefix(pc), self.settings
        timer = Timer()
        mpi = comm.tompi4py()
        given = pc.getOperators()[1]  # where the user composed the inputs; P: it assembled
        coords = get_coordinates(pc, given)
        has = mpi.allreduce(coords is not None, op=MPI.LOR)
        coords = coords if has else None
        bs = P.getBlockSize()
        user = user_subdomains(pc, given)
        collective_check(comm, len({u is None for u in mpi.allgather(user)}) == 1,
                         "subdomains were set on some ranks only: call ddlearn.pc.set_subdomains "
                         "on every rank")
        unassembled = is_unassembled(given)
        if unassembled:
            check_unassembled(given, s, user is not None, prefix)
        dimension = mpi.allreduce(coords.shape[1] if coords is not None and coords.ndim == 2
                                  else 0, op=MPI.MAX)
        # measured once (a parallel transpose), where the default for a system or CG needs it
        symmetric = functools.cache(lambda: is_symmetric(P))
        space = self.space = s.coarse_space_for(comm, prefix, has, bs, user is not None,
                                                dimension, neumann=unassembled,
                                                symmetric=lambda: symmetric() is not False)
        check_symmetric(P, options_ksp_type(pc), symmetric)
        own = space.subdomains(P) if space is not None else None
        auxiliary = None
        if unassembled:
            collective_check(comm, own is None, f"the {space and space.name} coarse space "
                             f"partitions the matrix itself, and a MATIS operator's subdomains "
                             f"are its processes: choose another -{prefix}coarse_space")
            I, AN = local_neumann(given, P, s.overlap)
            self.subdomains = Subdomains.from_sets(P, [I], True, 0, s.coarse_rank, bs,
                                                   partitioner="matis", prefix=prefix)
            auxiliary = [AN]
        elif own is not None:
            self.subdomains = own
        elif user is not None:
            self.subdomains = Subdomains.from_sets(P, user[0], user[1], s.overlap,
                                                   s.coarse_rank, bs, prefix=prefix)
        else:
            self.subdomains = Subdomains.from_matrix(
                P, s.subdomains or 4 * comm.getSize(), s.overlap, coords,
                s.partition or (space and space.partitioner), s.coarse_rank, bs, prefix)
        timer.lap("partition_s")
        if not unassembled:
            auxiliary = user_auxiliary(pc, given, self.subdomains)
        self._input = CoarseInput(P, self.subdomains, prefix, coords,
                                  near_null_space(P, s.near_null_space, coords, bs, prefix),
                                  auxiliary, bs)
        self._from_level_above = False
        if self._input.auxiliary is None:
            # a coarse level below a spectral one: its Neumann matrices from the level above
            self._input.auxiliary = subdomain_neumann(P, self.subdomains, prefix)
            self._from_level_above = self._input.auxiliary is not None
        self.variant, self.correction, self.local_solver = \
            s.local_type, s.correction_for(space, bs), s.local_solver
        timer.lap("basis_s")
        self._setup_s = timer.slowest(comm)
        super().initialize(pc, P)

    def coarse_basis(self, pc: PETSc.PC, P: PETSc.Mat, blocks, initial: bool) -> None:
        """The coarse basis on the values of ``P`` (collective): the first time, and on every
        update for a value-dependent space; from the local ``blocks`` extracted and not yet
        factored, so that a spectral space factors its pencil on their symbolic factorisation
        (:mod:`~ddlearn.classical.shared_factor`)."""
        timer = Timer()
        if self._from_level_above and not initial:
            # new values above: new pieces attached to the new A_0
            self._input.auxiliary = subdomain_neumann(P, self.subdomains, self._input.prefix)
        given = pc.getOperators()[1]
        if is_unassembled(given) and not initial:
            # new values in the processes' local matrices
            self._input.auxiliary = [neumann_on(given, self.subdomains.overlapping[0])]
        if self.space is not None and (initial or self.space.value_dependent):
            self.two_level.set_coarse_basis(None)
            if self.Phi is not None:
                self.Phi.destroy()
            self._input.local_blocks = blocks
            try:
                self.Phi, neumann = self._basis()
            finally:
                self._input.local_blocks = None
            self.two_level.set_coarse_basis(self.Phi, neumann)
        timer.lap("basis_s")
        self._setup_s["basis_s"] += timer.slowest(pc.getComm())["basis_s"]

    def _basis(self) -> tuple:
        """``(Phi, neumann)``: the coarse basis and the Neumann matrices it was built from
        (``None`` if none), for a spectral level below (collective)."""
        vectors = self.space.vectors(self._input)
        prefix, ranks = self._input.prefix, self.settings.coarse_ranks
        # n_0 = 0 (e.g. GDSW on one subdomain: no interface) leaves one level on one rank
        collective_check(self._input.comm, vectors.n0 == 0 or ranks <= vectors.n0,
                         f"-{prefix}coarse_ranks {ranks} is more than the n_0 = "
                         f"{vectors.n0} coarse functions of -{prefix}coarse_space "
                         f"{self.space.name}: use -{prefix}coarse_ranks {max(vectors.n0, 1)} "
                         f"or fewer")
        return coarse_basis(self._input, vectors, self.settings.coarse_rank,
                            ranks if vectors.n0 else 1), vectors.neumann

    def _summary(self) -> dict:
        """What the PC built (kept as :attr:`meta` after the set-up): the coarse space's name,
        ``n0`` and each family's summary under its name."""
        coarse = self.two_level.coarse
        out = {"coarse_space": self.space.name if self.space else "none",
               "correction": self.correction,
               "n0": self.Phi.getSize()[1] if self.Phi is not None else 0,
               "coarse_ranks": list(coarse.ranks) if coarse else [],
               "coarse_solver": coarse.solver if coarse else "",
               "neumann_from_level_above": self._from_level_above,
               "local_solves": str(self.two_level.local_solves)}
        parts = self.space.parts if isinstance(self.space, Composite) else \
            [self.space] if self.space else []
        for p in parts:
            out[p.name] = p.describe()
            out.update(getattr(p, "meta", {}))
        return out

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        if self.two_level is not None:
            s = self.subdomains
            viewer.printfASCII(f"  ddlearn two-level Schwarz: coarse space "
                               f"{self.space.name if self.space else 'none'}, partition "
                               f"{s.partitioner}, block size {s.block_size}, subdomain sizes "
                               f"{int(s.sizes.min())}..{int(s.sizes.max())}\n")
            if self.space is not None:
                self.space.view(viewer)
        super().view(pc, viewer)

    def reset(self, pc: PETSc.PC) -> None:
        if self.two_level is not None:
            self._setup_s = self.timing  # the last set-up's record outlives its objects
        super().reset(pc)
        if self.Phi is not None:
            self.Phi.destroy()
        self.subdomains = self.Phi = self._input = None


def _prefix(pc: PETSc.PC) -> str:
    """Where the PC's options live: its prefix followed by ``ddlearn_``."""
    return (pc.getOptionsPrefix() or "") + "ddlearn_"


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
