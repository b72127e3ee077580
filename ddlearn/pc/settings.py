r"""The generic settings of :class:`~ddlearn.pc.twolevel.TwoLevelSchwarzPC`, read from the options
database under the PC's prefix followed by ``ddlearn_`` (``-<prefix>ddlearn_...``) and checked on
every rank. A coarse-space family reads its own options (``-<prefix>ddlearn_<family>_...``,
:meth:`~ddlearn.classical.coarse_space.CoarseSpace.set_from_options`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from petsc4py import PETSc

from ..classical.coarse import FAMILIES, Spectral
from ..classical.coarse.interface import InterfaceCoarseSpace
from ..classical.coarse_space import Composite, CoarseSpace
from ..classical.overlapping import LOCAL_SOLVERS, check_local_solver
from ..classical.twolevel import CORRECTIONS
from ..decomposition.collective import collective_check
from ..decomposition.partition import PARTITIONERS
from ..decomposition.structured import box_grid
from .registry import make_coarse_space

__all__ = ["Settings", "LOCAL_TYPES", "LOCAL_SOLVERS"]

#: the one-level part's forms (PCASM types)
LOCAL_TYPES = ("basic", "restrict")


@dataclass
class Settings:
    r"""What the PC is asked for; each field is the default its option overrides.

    Attributes
    ----------
    coarse_space : str, CoarseSpace or None
        ``coarse_space NAME[+NAME...]``: ``none`` or the registry's families
        (:data:`~ddlearn.pc.registry.COARSE_SPACE_NAMES`); ``None``: spectral for a ``MATIS``
        operator (its local matrices are the Neumann matrices), hats with coordinates on
        a box partition of a scalar problem (two boxes or more per direction), harmonic for a
        symmetric system (block size > 1: elasticity) and gdsw (split by coefficient) for a
        nonsymmetric one, nicolaides otherwise.
    subdomains : int or None
        ``subdomains N``, independent of the ranks (``None``: 4 per rank).
    overlap : int
        ``overlap k``: layers of the matrix graph.
    partition : str or None
        ``partition NAME``, one of :data:`~ddlearn.decomposition.partition.PARTITIONERS`
        (``None``: :func:`~ddlearn.decomposition.partition.default_partitioner`).
    local_type : str
        ``local_type``: ``basic`` (symmetric, for CG) or ``restrict`` (RAS, GMRES).
    coarse_rank : int
        ``coarse_rank R``: the coarse rank (one coarse rank) or the first of them.
    correction : str or None
        ``coarse_correction``, one of :data:`~ddlearn.classical.twolevel.CORRECTIONS`
        (``None``: :meth:`correction_for`'s default).
    near_null_space : str
        ``near_null_space {auto,matrix,rigid_body,constant}``
        (:mod:`ddlearn.decomposition.nullspace`).
    coarse_ranks : int
        ``coarse_ranks P``: ranks the coarse problem is distributed over.
    local_solver : str
        ``local_solver``, one of :data:`~ddlearn.classical.overlapping.LOCAL_SOLVERS`: the
        factorisation of the local blocks
        (:func:`~ddlearn.classical.overlapping.local_factorisation`; ``auto``: CHOLMOD's
        Cholesky where the build has SuiteSparse, else MUMPS's, else PETSc's LU; LU wherever
        the blocks are not symmetric). A package the build lacks is refused.
        ``-<prefix>ddlearn_local_sub_pc_type`` and
        ``-<prefix>ddlearn_local_sub_pc_factor_mat_solver_type`` override it.
    """

    coarse_space: str | CoarseSpace | None = None
    subdomains: int | None = None
    overlap: int = 1
    partition: str | None = None
    local_type: str = "basic"
    coarse_rank: int = 0
    correction: str | None = None
    near_null_space: str = "auto"
    coarse_ranks: int = 1
    local_solver: str = "auto"

    def read(self, prefix: str) -> None:
        """Override the fields by the options under ``prefix`` (the PC's prefix + ``ddlearn_``)."""
        opts = PETSc.Options(prefix)
        # petsc4py treats a default of None as "required": '' and 0 stand for "not given"
        self.coarse_space = opts.getString("coarse_space", "") or self.coarse_space
        self.subdomains = opts.getInt("subdomains", self.subdomains or 0) or None
        self.overlap = opts.getInt("overlap", self.overlap)
        self.partition = opts.getString("partition", self.partition or "") or None
        self.local_type = opts.getString("local_type", self.local_type)
        self.coarse_rank = opts.getInt("coarse_rank", self.coarse_rank)
        self.coarse_ranks = opts.getInt("coarse_ranks", self.coarse_ranks)
        self.correction = opts.getString("coarse_correction", self.correction or "") or None
        self.near_null_space = opts.getString("near_null_space", self.near_null_space)
        self.local_solver = opts.getString("local_solver", self.local_solver)

    @property
    def uses_neumann(self) -> bool:
        """Whether the coarse space asked for is built from local Neumann matrices (a classical
        family's ``uses_neumann``: ``spectral``, alone or in a sum)."""
        spec = self.coarse_space
        if isinstance(spec, CoarseSpace):
            return spec.uses_neumann
        return any(getattr(FAMILIES.get(name.strip()), "uses_neumann", False)
                   for name in (spec or "").split("+"))

    @property
    def symmetric(self) -> bool:
        """A symmetric one-level part and form of the coarse correction."""
        return self.local_type == "basic" and CORRECTIONS.get(self.correction, True)

    def check(self, comm, prefix: str) -> None:
        """Refuse, on every rank, a choice that is not one, naming the option under ``prefix``."""
        for ok, what, value, choices in (
                (self.local_type in LOCAL_TYPES, "local_type", self.local_type, LOCAL_TYPES),
                (self.correction is None or self.correction in CORRECTIONS,
                 "coarse_correction", self.correction, CORRECTIONS),
                (self.partition is None or self.partition in PARTITIONERS, "partition",
                 self.partition, PARTITIONERS)):
            collective_check(comm, ok, f"unknown -{prefix}{what} {value!r}; choose one of "
                             f"{', '.join(choices)}")
        check_local_solver(comm, self.local_solver, f"-{prefix}local_solver")
        size = comm.getSize()
        collective_check(comm, 0 <= self.coarse_rank < size,
                         f"-{prefix}coarse_rank {self.coarse_rank} is not a rank of this "
                         f"{size}-rank communicator")
        collective_check(comm, 1 <= self.coarse_ranks <= size,
                         f"-{prefix}coarse_ranks {self.coarse_ranks}: the coarse problem is "
                         f"distributed over 1 to {size} ranks (this communicator's size); use "
                         f"-{prefix}coarse_ranks 1 (one coarse rank, the default) up to {size}")

    def correction_for(self, space: CoarseSpace | None, block_size: int) -> str:
        """The form of the coarse correction asked for; by default ``balanced`` for a GDSW-type
        space on a system (block size > 1), ``additive`` otherwise. Measured
        (``benchmarks/petsc_tutorials.py``): on elasticity from the matrix alone the balanced
        form cuts GDSW's iterations by about a third, for two more products with the matrix and
        one more coarse solve per apply."""
        if self.correction is not None:
            return self.correction
        interface = isinstance(space, InterfaceCoarseSpace) or (
            isinstance(space, Composite) and any(isinstance(p, InterfaceCoarseSpace)
                                                 for p in space.parts))
        return "balanced" if block_size > 1 and interface else "additive"

    def coarse_space_for(self, comm, prefix: str, has_coordinates: bool, block_size: int,
                         user_sets: bool, dimension: int = 0, neumann: bool = False,
                         symmetric: Callable[[], bool] = lambda: True) -> CoarseSpace | None:
        """The coarse space asked for (by default the adaptive spectral space,
        :meth:`~ddlearn.classical.coarse.spectral.Spectral.adaptive`, where the operator carries
        its subdomains' Neumann matrices (``neumann``: a ``MATIS``), hats with coordinates on a box
        partition of a scalar problem whose box grid has two boxes or more per direction,
        harmonic for a symmetric system and gdsw for a nonsymmetric one, nicolaides otherwise),
        configured from its options and refused on every rank where the matrix cannot serve it
        (block size, coordinates, the user's sets). ``dimension``: the coordinates' (0:
        unknown); ``symmetric``: whether the matrix is symmetric (called, collectively, only
        where the default for a system is chosen)."""
        spec = self.coarse_space
        if spec is None and neumann:
            # GenEO's own setting: the exact Neumann matrices, no algebraic approximation, as
            # many eigenvectors per subdomain as the threshold asks for
            spec = Spectral.adaptive()
        if spec is None:
            N = self.subdomains or 4 * comm.getSize()
            # hats live on the interior vertices of the box grid: none with one box along an
            # axis (N = 4 in 3D is 1 x 2 x 2)
            boxes = has_coordinates and block_size == 1 and not user_sets and \
                self.partition in (None, "boxes") and \
                (dimension == 0 or min(box_grid(N, dimension)) >= 2)
            # a system (elasticity from a C program: the matrix, its block size and near-null
            # space, no Neumann matrices): the spectral space is refused (the algebraic Neumann
            # matrices are indefinite) and nicolaides is far from robust; harmonic reads all it
            # needs from the matrix and, unlike gdsw, stays robust where stiff inclusions cross
            # the interface, at two to five times gdsw's set-up (measured:
            # benchmarks/petsc_tutorials.py, benchmarks/time_to_solution.py); its traces are
            # compressed in the energy norm of the diagonal blocks, which needs a symmetric
            # matrix: gdsw for a nonsymmetric system
            spec = "hats" if boxes else "nicolaides" if block_size == 1 else \
                "harmonic" if symmetric() else "gdsw"
        space, error = spec if isinstance(spec, CoarseSpace) else None, None
        if space is None:
            try:
                space = make_coarse_space(spec, f"-{prefix}coarse_space")
            except ValueError as e:
                error = str(e)
        collective_check(comm, error is None, str(error))
        if space is None:
            return None
        space.set_from_options(prefix)
        blocks = ", ".join(n for n, c in FAMILIES.items() if c.supports_blocks)
        collective_check(comm, space.supports_blocks or block_size == 1,
                         f"the {space.name} coarse space serves scalar problems only, and this "
                         f"matrix has block size {block_size}: use {blocks} (they use the "
                         f"near-null space)")
        wanted = space.partitioner
        collective_check(comm, wanted is None or (has_coordinates and not user_sets and
                                                  self.partition in (None, wanted)),
                         f"the {space.name} coarse space lives on a {wanted} partition: it needs "
                         f"coordinates and -{prefix}partition {wanted}"
                         f"{', not the given subdomains' if user_sets else ''} (or use "
                         f"-{prefix}coarse_space nicolaides, which needs the graph alone)")
        return space
