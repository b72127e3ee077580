r"""Classical two-level additive Schwarz as the sum of its composable pieces:

.. math:: M_{AS2}^{-1} = \underbrace{\sum_i R_i^T A_i^{-1} R_i}_{\text{overlapping}}
          + \underbrace{\Phi A_0^{-1}\Phi^T}_{\text{Galerkin coarse}},
          \qquad A_i = R_i A R_i^T,\ A_0 = \Phi^T A \Phi,

the one-level part a PCASM on the given subdomains (:mod:`.overlapping`, options prefix
``local_`` after the PC's; its blocks factored by the local solver of
:func:`~.overlapping.local_factorisation` and checked on every rank), the coarse part a
:class:`~.galerkin.CoarseCorrection` (prefix ``coarse_``, on one or several coarse ranks),
both nested PETSc objects. :class:`TwoLevelOperator` holds the pieces and their sum, set up in
explicit steps (initialize for a structure, update for new values); :class:`TwoLevelSchwarz` is
the petsc4py PC context, the one place that decides which step a set-up is, and
:class:`ddlearn.pc.TwoLevelSchwarzPC` extends it with the options and the coarse-space registry.

The coarse correction :math:`Q = \Phi A_0^{-1}\Phi^T` enters in one of three forms
(:data:`CORRECTIONS`), with :math:`M_1^{-1}` the one-level part:

- ``additive``: :math:`Q + M_1^{-1}` (symmetric; one coarse solve per apply);
- ``balanced``: :math:`Q + (I - QA)\,M_1^{-1}(I - AQ)` (symmetric, the balancing
  Neumann–Neumann form; two coarse solves and two products with :math:`A`);
- ``deflated``: :math:`Q + M_1^{-1}(I - AQ)` (nonsymmetric: GMRES/FGMRES; one coarse solve, one
  product with :math:`A`).
"""
from __future__ import annotations

from petsc4py import PETSc

from ..decomposition.petsc_rows import assembled_aij
from ..decomposition.timing import Timer
from .galerkin import CoarseCorrection
from .neumann import neumann_matrices
from .overlapping import asm_pc, factor_blocks
from .shared_factor import LocalBlocks
from .splitting import galerkin_splitting

__all__ = ["TwoLevelOperator", "TwoLevelSchwarz", "matrix_structure", "CORRECTIONS"]

#: the forms of the coarse correction; the value says whether the form is symmetric
CORRECTIONS = {"additive": True, "balanced": True, "deflated": False}


def matrix_structure(P: PETSc.Mat) -> tuple:
    """What a re-setup compares to decide between *update* (same object, same sizes and number
    of stored nonzeros: new values only) and *initialize* (everything rebuilt). petsc4py 3.26
    does not expose MatGetNonzeroState; the global nonzero count stands in for it."""
    return (P.handle, P.getSizes(), P.getInfo(PETSc.Mat.InfoType.GLOBAL_SUM)["nz_used"])


class TwoLevelOperator:
    r"""The pieces of :math:`M_{AS2}^{-1}` and their sum: the one-level PCASM :attr:`local`
    (:math:`\sum_i R_i^TA_i^{-1}R_i`), the Galerkin :attr:`coarse` correction
    (:math:`\Phi A_0^{-1}\Phi^T`, a :class:`~.galerkin.CoarseCorrection`) and the form
    ``correction`` that combines them; no PETSc PC protocol (:class:`TwoLevelSchwarz` is the
    context that drives it).

    The set-up runs in explicit steps, each collective:

    1. :meth:`initialize` (a new structure: the PCASM on the index sets, its blocks extracted)
       or :meth:`update` (new values on that structure: the blocks extracted again); both
       return the blocks, not yet factored, so that a coarse space built next can share their
       factorisation (:mod:`~.shared_factor`);
    2. :meth:`set_coarse_basis` where the basis is new;
    3. :meth:`factor`: the blocks factored and checked, the coarse correction built on a new
       basis or given the new values (numeric :math:`\Phi^TA\Phi` and refactorisation).

    ``timing`` holds the set-up's split, slowest rank: ``local_s`` (PCASM set-up and local
    factorisations), ``coarse_product_s`` (:math:`\Phi^TA\Phi`), ``coarse_setup_s`` (the coarse
    KSP's set-up: factorisation or nested method), ``coarse_s`` (their sum); and, on this rank,
    the applies since the set-up: ``applies``, ``apply_local_s`` (the one-level part),
    ``apply_coarse_s`` (:math:`\Phi^Tx`, coarse solve, :math:`\Phi y`); clocks only, no
    communication in the apply (:meth:`apply_timing` reduces over the ranks).

    Parameters
    ----------
    subdomains : RowLayout or Subdomains
        This rank's subdomains (``index_sets``).
    Phi : PETSc.Mat or None
        Coarse basis, rows like the matrix, columns on the coarse rank(s); ``None`` for
        one-level Schwarz alone (or a basis set later, :meth:`set_coarse_basis`). Not owned.
    variant : str
        ASM variant of the local part; ``basic`` keeps the preconditioner symmetric.
    correction : str
        Form of the coarse correction, one of :data:`CORRECTIONS`.
    local_solver : str
        Factorisation of the local blocks, one of
        :data:`~.overlapping.LOCAL_SOLVERS` (:func:`~.overlapping.local_factorisation`:
        ``auto`` is CHOLMOD's Cholesky where the build has it); the PCASM's
        ``-{prefix}local_sub_pc_type`` and ``-{prefix}local_sub_pc_factor_mat_solver_type``
        override it. ``local_solves`` (a :class:`~.overlapping.LocalFactorisation`) says what
        the blocks use once factored.
    prefix : str
        Options prefix of the nested objects: ``-{prefix}local_*`` (the PCASM) and
        ``-{prefix}coarse_*`` (the coarse KSP).
    """

    def __init__(self, subdomains, Phi: PETSc.Mat | None, variant: str = "basic",
                 correction: str = "additive", local_solver: str = "auto", prefix: str = ""):
        self.subdomains, self.Phi, self.variant, self.prefix = subdomains, Phi, variant, prefix
        self.correction, self.local_solver = correction, local_solver
        self.local_solves = None  # what the blocks use, once factored
        self.local = self.coarse = self.A = self._neumann = None
        self._setup_s, self._extract_s = {}, 0.0
        self._work = ()
        self._tally, self._applies = Timer("local"), 0

    @property
    def symmetric(self) -> bool:
        """Symmetric local part and form, and a coarse solve that is a fixed symmetric linear
        map (known after the set-up)."""
        return self.variant == "basic" and CORRECTIONS[self.correction] and \
            (self.coarse is None or self.coarse.symmetric)

    @property
    def timing(self) -> dict:
        """The set-up split and this rank's apply split (see the class docstring)."""
        return {**self._setup_s, **self.apply_timing()}

    def apply_timing(self, comm=None) -> dict:
        """``applies``, ``apply_local_s``, ``apply_coarse_s`` since the set-up, on this rank or
        (``comm`` given; collective) on the slowest rank."""
        local, coarse = self._tally, self.coarse.tally if self.coarse else Timer("coarse")
        if comm is None:
            seconds = {**local.seconds, **coarse.seconds}
        else:
            seconds = {**local.slowest(comm), **coarse.slowest(comm)}
        return {"applies": self._applies, "apply_local_s": seconds["local"],
                "apply_coarse_s": seconds["coarse"]}

    def initialize(self, P: PETSc.Mat) -> LocalBlocks:
        """The structure for ``P``: the one-level PCASM on the index sets, its blocks extracted
        and their factorisation chosen but not run (collective). Returns the blocks."""
        clock = Timer()
        self.local = asm_pc(P, self.subdomains, self.variant, self.prefix + "local_",
                            self.local_solver, factor=False)
        self._extract_s = clock.lap("local_s")
        return LocalBlocks(self.local)

    def update(self, P: PETSc.Mat) -> LocalBlocks:
        """New values of ``P`` on the structure of :meth:`initialize`: the blocks extracted
        again, not factored (collective). Returns the blocks."""
        clock = Timer()
        self.local.setOperators(P, P)
        self.local.setUp()
        self._extract_s = clock.lap("local_s")
        return LocalBlocks(self.local)

    def set_coarse_basis(self, Phi: PETSc.Mat | None, neumann: list | None = None) -> None:
        """A new coarse basis (for coarse spaces that depend on the matrix values): the next
        :meth:`factor` builds the coarse correction on it and keeps the overlapping part.
        ``neumann``: the local Neumann matrices the basis was computed from, if any, for a
        spectral level below (:meth:`_splitting`)."""
        if self.coarse is not None:
            self.coarse.destroy()
        self.coarse, self.Phi, self._neumann = None, Phi, neumann

    def factor(self, P: PETSc.Mat) -> None:
        """The blocks factored and checked on every rank (a singular block raises the same
        ``ValueError`` everywhere, :func:`~.overlapping.factor_blocks`), then the coarse
        correction built on the basis, or given the new values of ``P`` (collective);
        ``timing`` records the split."""
        clock = Timer()
        self.local_solves = factor_blocks(self.local, self.subdomains, self.local_solver)
        clock.lap("local_s")
        clock.seconds["local_s"] += self._extract_s  # this rank's whole one-level set-up
        self._setup_s = clock.slowest(P.getComm())
        if self.coarse is not None:
            self.coarse.update(P)
        elif self.Phi is not None:
            self.coarse = CoarseCorrection(P, self.Phi, self.prefix, lambda: self._splitting(P))
        self._neumann = None  # used, or not wanted: the set-up's peak memory only
        self.A = P
        split = self.coarse.timing if self.coarse is not None else \
            {"coarse_product_s": 0.0, "coarse_setup_s": 0.0}
        self._setup_s.update(split, coarse_s=sum(split.values()))
        self._tally, self._applies = Timer("local"), 0
        if self.coarse is not None and self.correction != "additive" and not self._work:
            self._work = tuple(P.createVecLeft() for _ in range(3))

    def _splitting(self, P: PETSc.Mat):
        r"""This rank's pieces :math:`(R_i\Phi)^TA_i^N(R_i\Phi)` of :math:`A_0`'s splitting
        (:func:`~.splitting.galerkin_splitting`), from the coarse space's Neumann matrices or,
        without them, the algebraic ones (refused where indefinite; collective)."""
        neumann = self._neumann if self._neumann is not None else neumann_matrices(
            P, self.subdomains, None, "a spectral coarse space on the coarse level (multilevel "
            "GenEO, from this level's Neumann matrices)", prefix=self.prefix)
        return galerkin_splitting(self.Phi, self.subdomains, neumann)

    def _timed(self, one_level):
        """``one_level`` with its seconds added to the local part of the apply."""
        def timed(x, y):
            start = self._tally.start()
            one_level(x, y)
            self._tally.add("local", start)
        return timed

    def apply(self, x: PETSc.Vec, y: PETSc.Vec) -> None:
        """:math:`y = M_{AS2}^{-1}x` in the form ``correction``."""
        self._apply(x, y, self._timed(self.local.apply))

    def apply_transpose(self, x: PETSc.Vec, y: PETSc.Vec) -> None:
        """:math:`y = M_{AS2}^{-T}x`."""
        if self.correction == "deflated" and self.coarse is not None:
            # (Q + M1 (I - AQ))^T = Q + (I - QA) M1^T
            q, z, t = self._work
            self.coarse.apply(x, y)
            self.local.applyTranspose(x, z)
            self.A.mult(z, t)
            self.coarse.apply(t, q)
            y.axpy(1.0, z)
            y.axpy(-1.0, q)
            return
        self._apply(x, y, self._timed(self.local.applyTranspose))

    def _apply(self, x: PETSc.Vec, y: PETSc.Vec, one_level) -> None:
        self._applies += 1
        if self.coarse is None:
            one_level(x, y)
        elif self.correction == "additive":
            one_level(x, y)
            self.coarse.apply(x, y, add=True)
        else:
            q, z, r = self._work
            self.coarse.apply(x, q)             # q = Q x
            self.A.mult(q, r)
            r.aypx(-1.0, x)                     # r = (I - A Q) x
            one_level(r, z)                     # z = M1 r
            y.waxpy(1.0, q, z)
            if self.correction == "balanced":   # y -= Q A z
                self.A.mult(z, r)
                self.coarse.apply(r, q)
                y.axpy(-1.0, q)

    def view(self, viewer: PETSc.Viewer) -> None:
        s = self.subdomains
        n0 = self.Phi.getSize()[1] if self.Phi is not None else 0
        ranks = _ranks_text(self.coarse.ranks) if self.coarse is not None else "-"
        viewer.printfASCII(f"  two-level Schwarz, {self.correction} coarse correction: N = {s.N} "
                           f"subdomains, overlap {s.overlap}, n_0 = {n0} coarse functions on "
                           f"{ranks}, local variant {self.variant}\n")
        if self.A is None:
            return
        viewer.printfASCII(f"  local solves: {self.local_solves} (asked for: "
                           f"{self.local_solver})\n")
        t, a = self._setup_s, self.apply_timing(self.A.getComm())
        viewer.printfASCII(f"  set-up (s, slowest rank): local {t['local_s']:.3g}, coarse "
                           f"product {t['coarse_product_s']:.3g}, coarse set-up "
                           f"{t['coarse_setup_s']:.3g}; {a['applies']} applies (s, slowest "
                           f"rank): local {a['apply_local_s']:.3g}, coarse "
                           f"{a['apply_coarse_s']:.3g}\n")
        viewer.printfASCII("  overlapping (one-level) part:\n")
        viewer.pushASCIITab()
        self.local.view(viewer)
        viewer.popASCIITab()
        if self.coarse is not None:
            viewer.printfASCII(f"  Galerkin coarse solver ({ranks}):\n")
            self.coarse.view(viewer)

    def destroy(self) -> None:
        """Release the PETSc objects (collective: now, not in garbage-collection order)."""
        for o in (self.local, self.coarse, *self._work):
            if o is not None:
                o.destroy()
        self.local = self.coarse = self.A = None
        self._work = ()


class TwoLevelSchwarz:
    r"""Two-level Schwarz :math:`M_{AS2}^{-1}` as a petsc4py Python PC context: the one life
    cycle of the method.

    ``setUp`` decides, in one place, between *update* (the same matrix with new values, same
    nonzero structure, :func:`matrix_structure`: :meth:`update`) and *initialize* (the first
    set-up, or another structure: :meth:`reset`, then :meth:`initialize`), as Firedrake's
    ``PCBase.setUp`` does; ``KSPSetReusePreconditioner`` skips both. Both drive the
    :class:`TwoLevelOperator` :attr:`two_level` through its steps, with :meth:`coarse_basis`
    between the extraction of the local blocks and their factorisation.

    Here on given subdomains and coarse basis. :class:`ddlearn.pc.TwoLevelSchwarzPC` extends
    :meth:`initialize` (the partition and the coarse space's inputs) and :meth:`coarse_basis`
    (the coarse space, from the options database), and adds nothing else to the life cycle.

    :attr:`timing`: the operator's set-up and apply split (:class:`TwoLevelOperator`).

    Parameters
    ----------
    subdomains : RowLayout or Subdomains or None
        This rank's subdomains (``index_sets``); ``None`` where :meth:`initialize` builds them.
    Phi : PETSc.Mat or None
        Coarse basis, rows like the matrix, columns on the coarse rank(s); ``None`` for
        one-level Schwarz alone or where :meth:`coarse_basis` builds it. Not owned.
    variant, correction, local_solver
        Those of :class:`TwoLevelOperator`.
    prefix : str
        Added to the PC's options prefix for the nested objects:
        ``-{pc prefix}{prefix}local_*`` and ``-{pc prefix}{prefix}coarse_*``.
    """

    def __init__(self, subdomains, Phi: PETSc.Mat | None, variant: str = "basic",
                 prefix: str = "", correction: str = "additive", local_solver: str = "auto"):
        if correction not in CORRECTIONS:
            raise ValueError(f"unknown coarse correction {correction!r}; choose one of "
                             f"{', '.join(CORRECTIONS)}")
        self.subdomains, self.Phi, self.variant, self.prefix = subdomains, Phi, variant, prefix
        self.correction, self.local_solver = correction, local_solver
        self.two_level: TwoLevelOperator | None = None
        self._structure = None
        self._assembled: PETSc.Mat | None = None  # the Pmat converted to AIJ, if it is not

    @property
    def symmetric(self) -> bool:
        """Whether the set-up operator (or, before it, the settings) is symmetric."""
        if self.two_level is not None:
            return self.two_level.symmetric
        return self.variant == "basic" and CORRECTIONS[self.correction]

    @property
    def timing(self) -> dict:
        """The set-up split and this rank's apply split (:class:`TwoLevelOperator`)."""
        return self.two_level.timing if self.two_level is not None else {}

    def setUp(self, pc: PETSc.PC) -> None:
        """Initialize or update (the one place that decides it; collective), on the Pmat or,
        for a Pmat stored otherwise (BAIJ, SBAIJ, dense, unassembled ``MATIS``), on its AIJ
        conversion (:func:`~ddlearn.decomposition.petsc_rows.assembled_aij`; converted again
        into the same matrix on an update)."""
        _, P = pc.getOperators()
        structure = matrix_structure(P)
        try:
            if self.two_level is not None and self._structure == structure:
                self.update(pc, assembled_aij(P, self._assembled))
            else:
                self.reset(pc)
                A = assembled_aij(P)
                self._assembled = A if A.handle != P.handle else None
                self.initialize(pc, A)
        except ValueError:
            self.reset(pc)  # collective: every rank raised the same error
            raise
        self._structure = structure

    def initialize(self, pc: PETSc.PC, P: PETSc.Mat) -> None:
        """Everything for the structure of ``P`` and its first values (collective): the
        operator's pieces, the coarse basis (:meth:`coarse_basis`), the factorisations."""
        self.two_level = TwoLevelOperator(self.subdomains, self.Phi, self.variant,
                                          self.correction, self.local_solver,
                                          (pc.getOptionsPrefix() or "") + self.prefix)
        blocks = self.two_level.initialize(P)
        self.coarse_basis(pc, P, blocks, initial=True)
        self.two_level.factor(P)

    def update(self, pc: PETSc.PC, P: PETSc.Mat) -> None:
        """New values of ``P`` on the structure of :meth:`initialize` (collective): the local
        blocks and :math:`A_0` refactored numerically, the basis rebuilt where
        :meth:`coarse_basis` says so."""
        blocks = self.two_level.update(P)
        self.coarse_basis(pc, P, blocks, initial=False)
        self.two_level.factor(P)

    def coarse_basis(self, pc: PETSc.PC, P: PETSc.Mat, blocks: LocalBlocks,
                     initial: bool) -> None:
        """Where a coarse basis is built, between the blocks' extraction and their
        factorisation (``blocks``, to share it); ``initial``: the set-up after
        :meth:`initialize`. The given basis here: nothing to build."""

    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.apply(x, y)

    def applyTranspose(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.apply_transpose(x, y)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        if self.two_level is None:
            viewer.printfASCII("  two-level Schwarz: not set up\n")
            return
        self.two_level.view(viewer)

    def reset(self, pc: PETSc.PC) -> None:
        if self.two_level is not None:
            self.two_level.destroy()
        if self._assembled is not None:
            self._assembled.destroy()
        self.two_level = self._structure = self._assembled = None

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in rank-dependent garbage-collection order.
        self.reset(pc)


def _ranks_text(ranks) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else \
        f"{len(ranks)} ranks ({', '.join(map(str, ranks))})"
