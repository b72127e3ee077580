r"""Schwarz attention distributed over MPI ranks, like the solver: each rank holds the tokens it
owns, exchanges the overlap with its neighbours and takes part in one allreduce for the coarse
level.

Ownership. The ``N`` subdomains of a :class:`~ddlearn.nn.layout.TokenLayout` go to the ``P``
ranks in balanced contiguous blocks of subdomain numbers, the first ``N mod P`` ranks one more
(:func:`~ddlearn.decomposition.structured.assign_ranks`, the solver's rule), or any map given as
``subdomain_ranks``; rank ``r`` owns the tokens :math:`O_r = \{t:\ \mathrm{part}(t)\text{ is
one of its subdomains}\}` (the non-overlapping parts, so every token has exactly one owner) and
receives as *ghosts* :math:`G_r = \bigcup_{i\in r} I_i \setminus O_r`, the overlap that other
ranks own. Input and output of :meth:`DistributedSchwarzMixer.forward` are the owned rows,
``[batch, |O_r|, channels]`` in increasing token number.

With :math:`Y = Y_{loc} + Y_{c}` the output of :class:`~ddlearn.nn.schwarz.SchwarzMixer` (before
:math:`W_O`), rank ``r`` computes

.. math::

    Y_{loc}|_{O_r} = \sum_{s}\ E_{s\to r}^T\Big(\sum_{i\in s} R_i^TD_i^{1/2}\,
        \mathrm{Att}(R_iQ,\ R_iK,\ D_i^{1/2}R_iV)\Big),
    \qquad
    Y_c|_{O_r} = \Phi|_{O_r}\,\mathrm{Att}\Big(\sum_s \hat\Phi|_{O_s}^T Q,\ \dots\Big),

in three communication steps per forward, all of :mod:`ddlearn.nn.comm` (mpi4py point to point
and one allreduce; no PETSc):

1. *ghost exchange* (:math:`R_i` across ranks, the PETSc-style scatter FORWARD + INSERT written
   with ``Isend``/``Irecv``): the rows of :math:`G_r` are received from their owners; by
   default the input rows :math:`x_t` (``channels`` numbers per row; :math:`Q, K, V` of the ghosts are then computed
   locally, the same arithmetic as on the owner) or, with ``ghosts='qkv'``, the rows of
   :math:`[Q\,K\,V]` (three times the bytes);
2. *reverse exchange* (:math:`R_i^T` with ADD, the reverse scatter): the local output of rank
   ``r``'s subdomains on its ghost rows is sent to their owners and added there (none in the
   restricted form, ``restricted=True``: every query is an owned row);
3. *coarse allreduce*: each rank pools its owned rows, :math:`\hat\Phi|_{O_r}^T[Q\,K\,V]`
   (``[batch, n0, 3 channels]``), one ``Allreduce(SUM)`` gives :math:`\hat\Phi^T[Q\,K\,V]` on
   every rank, the coarse attention is computed redundantly on every rank and spread to the
   owned rows with :math:`\Phi|_{O_r}`.

Every step is differentiable with its adjoint as backward: the ghost gather's backward sends the
ghost gradients back to the owners and adds them (step 2), the reverse exchange's backward is a
gather (step 1), and the backward of the coarse allreduce-sum is an allreduce-sum of the
gradients (:func:`~ddlearn.nn.comm.shared_sum`). Parameters are replicated: after
``loss.backward()`` with the global loss :math:`\sum_r \ell_r` (each rank's loss on its owned
rows), each rank holds its share of every parameter gradient and
:func:`~ddlearn.nn.comm.allreduce_gradients` sums them, after which forward
output, input gradients and parameter gradients equal the serial mixer's with the same
parameters (up to the order of the floating-point sums). The module has the serial mixer's
parameters under the same names, so one ``state_dict`` serves both.

Bytes. :attr:`DistributedSchwarzMixer.traffic` counts the bytes this rank sent in its last
forward (ghost rows, reverse-exchange rows, and the allreduce payload, i.e. the size of the array
it contributes, zero on one rank; the allreduce algorithm's own internal messages are MPI's
business and not counted); :meth:`~ddlearn.decomposition.record.DecompositionRecord.rank_view`
predicts the ghost and reverse rows of every rank from the layout alone (no communication), for
any ``P``. The ghost bytes of a rank depend
on the boundary of its own subdomains towards other ranks only, the coarse allreduce payload on
:math:`n_0` (one column per subdomain with the default ``nicolaides`` basis): it grows with the number
of subdomains.
"""
from __future__ import annotations

import numpy as np
import torch

from .comm import Exchange, add_to_owners, ghosts, mpi_comm, shared_sum
from .kernels import coarse_restrict
from .mixer import merge_heads, split_heads
from .schwarz import SchwarzMixer

__all__ = ["DistributedSchwarzMixer", "GHOSTS"]

GHOSTS = ("inputs", "qkv")


# -- the mixer ---------------------------------------------------------------------------------

class DistributedSchwarzMixer(SchwarzMixer):
    r"""Two-level Schwarz attention with the tokens distributed over the ranks of ``comm`` (see
    the module docstring for the formula and the three communication steps).

    Parameters
    ----------
    channels, heads, attention, levels, prolongation, combine, restricted
        As :class:`~ddlearn.nn.schwarz.SchwarzMixer`; the parameters have the same names, so
        ``load_state_dict`` takes a serial mixer's state (and the other way round).
    layout : TokenLayout, optional
        The *global* layout, identical on every rank (build it from all token coordinates on
        every rank; it is cached). Can be set later with :meth:`set_layout`.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``; the mixer communicates on a duplicate.
    ghosts : {'inputs', 'qkv'}
        What the ghost exchange sends per ghost row: the input row (``channels`` numbers,
        default) or the rows of :math:`Q, K, V` (``3 channels``).
    subdomain_ranks : array_like of int, shape (N,), optional
        The rank of each subdomain (default
        :func:`~ddlearn.decomposition.structured.assign_ranks`).

    Attributes
    ----------
    owned : ndarray
        The token numbers this rank holds (:math:`O_r`, increasing): ``forward`` takes and
        returns ``[batch, len(owned), channels]``.
    traffic : dict
        Bytes this rank sent in its last forward: ``ghost``, ``reverse``, ``allreduce``,
        ``total``.

    Examples
    --------
    >>> layout = TokenLayout.build(coords, subdomains=16, overlap=1)  # every rank
    >>> mixer = DistributedSchwarzMixer(64, heads=4, layout=layout)
    >>> mixer.load_state_dict(serial.state_dict())
    >>> y_owned = mixer(mixer.scatter(x))             # x: [B, T, C], the same on every rank
    >>> loss = (y_owned ** 2).sum(); loss.backward()
    >>> allreduce_gradients(mixer, mixer.comm)        # ddlearn.nn.comm; then optimiser.step()
    """

    name = "distributed schwarz"

    def __init__(self, channels: int, heads: int = 4, attention: str = "softmax",
                 levels: str = "both", layout=None, comm=None, ghosts: str = "inputs",
                 subdomain_ranks=None, *, prolongation: str = "phi", combine: str = "split",
                 restricted: bool = False):
        if ghosts not in GHOSTS:
            raise ValueError(f"distributed schwarz mixer: unknown ghosts {ghosts!r}, use one of "
                             f"{GHOSTS}")
        self.comm = mpi_comm(comm).Dup()
        self.ghosts, self.subdomain_ranks = ghosts, subdomain_ranks
        self.plan = None
        self.traffic = {"ghost": 0, "reverse": 0, "allreduce": 0, "total": 0}
        super().__init__(channels, heads, attention=attention, levels=levels,
                         prolongation=prolongation, combine=combine, layout=layout,
                         restricted=restricted)

    @classmethod
    def from_serial(cls, mixer: SchwarzMixer, comm=None, **kwargs) -> "DistributedSchwarzMixer":
        """The distributed twin of ``mixer``: same settings, layout and parameter values."""
        dist = cls(mixer.channels, mixer.heads, attention=mixer.attention, levels=mixer.levels,
                   prolongation=mixer.prolongation, combine=mixer.combine, layout=mixer.layout,
                   restricted=mixer.restricted, comm=comm, **kwargs)
        dist = dist.to(next(mixer.parameters()).dtype)
        dist.load_state_dict(mixer.state_dict())
        return dist

    def set_layout(self, layout) -> None:
        """Use the global ``layout`` from now on and work out this rank's share of it.

        Raises
        ------
        ValueError
            On every rank, when the layout has fewer subdomains than there are ranks, or (for
            ``restricted``) a part lies outside its set.
        """
        self.layout = layout
        self._tensors = {}
        if layout is None:
            self.plan = None
            return
        P, r = self.comm.Get_size(), self.comm.Get_rank()
        self.plan = layout.rank_view(P, r, self.subdomain_ranks, parts=self.restricted)
        self.owned = self.plan["owned"]
        self._exchange = Exchange(self.comm, self.plan["recv"], self.plan["send"],
                                  len(self.plan["owned"]))

    def _local_tensors(self, device, dtype) -> dict:
        key = (str(device), dtype)
        if key not in self._tensors:
            loc, phi = self.plan["local"], self.plan["phi"]
            t = lambda a, dt=dtype: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
            self._tensors[key] = {
                "index": t(loc["index"], torch.long), "sqrt_D": t(loc["sqrt_D"]),
                "mask": t(loc["sqrt_D"] > 0, torch.bool), "n": t(loc["sizes"]),
                "phi_rows": t(phi["rows"], torch.long), "phi_cols": t(phi["cols"], torch.long),
                "phi_vals": t(phi["vals"]), "phi_mean": t(phi["mean"])}
            if self.restricted:
                self._tensors[key]["parts"] = t(loc["parts"], torch.long)
        return self._tensors[key]

    def scatter(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows ``x[:, owned]`` of a global ``[B, T, C]`` tensor."""
        return x[:, torch.as_tensor(self.owned, device=x.device)]

    def gather(self, y: torch.Tensor) -> torch.Tensor:
        """The global ``[B, T, C]`` tensor from every rank's owned rows (collective; for tests
        and inference, not differentiable)."""
        parts = self.comm.allgather((self.owned, y.detach().to("cpu").numpy()))
        out = np.empty((y.shape[0], self.layout.tokens, y.shape[2]), dtype=parts[0][1].dtype)
        for owned, rows in parts:
            out[:, owned] = rows
        return torch.from_numpy(out).to(y.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plan is None:
            raise ValueError("distributed schwarz mixer has no token layout: call "
                             "set_layout(TokenLayout.build(coords, ...)) with the global "
                             "coordinates on every rank first")
        if x.dim() != 3 or x.shape[1:] != (len(self.owned), self.channels):
            raise ValueError(f"distributed schwarz mixer: input must have this rank's "
                             f"{len(self.owned)} owned tokens, shape [batch, {len(self.owned)}, "
                             f"{self.channels}] (use scatter(x) on a global [batch, "
                             f"{self.layout.tokens}, {self.channels}]), got {tuple(x.shape)}")
        return self.mix(x)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        self._counter = {"allreduce": 0}
        self._exchange.bytes = 0
        self.traffic.update(ghost=0, reverse=0)
        L = self._local_tensors(x.device, x.dtype)
        terms = self.terms(x, self.qkv(x), L)
        self.traffic.update(allreduce=self._counter["allreduce"])
        self.traffic["total"] = sum(self.traffic[k] for k in ("ghost", "reverse", "allreduce"))
        return self.out(self.combined(terms))

    def local_term(self, x, qkv, L) -> torch.Tensor:
        """The local level on this rank's owned rows: the ghost rows gathered (their inputs,
        or their q/k/v), the subdomains attended, the ghost rows' outputs sent back and added
        to their owners (:math:`R_i^T` with ADD)."""
        ex, n_own = self._exchange, x.shape[1]
        if self.ghosts == "inputs":
            z = torch.cat([qkv, self.qkv(ghosts(x, ex))], dim=1)
        else:
            z = torch.cat([qkv, ghosts(qkv, ex)], dim=1)
        ghost_bytes = ex.bytes
        y = super().local_term(None, z, L)  # [B, owned + ghosts, C_local]
        if self.restricted:  # only owned tokens asked: the ghost rows got nothing
            y = y[:, :n_own]
        else:
            y = y[:, :n_own] + add_to_owners(y[:, n_own:], ex)
        self.traffic.update(ghost=ghost_bytes, reverse=ex.bytes - ghost_bytes)
        return y

    def coarse_term(self, qkv: torch.Tensor, L: dict) -> torch.Tensor:
        r""":math:`\Phi|_{O_r}\,\mathrm{Att}(\sum_s\hat\Phi|_{O_s}^T[Q\,K\,V])` from this
        rank's ``[B, owned, 3C]`` rows: pool, one allreduce, redundant coarse attention,
        prolongation to the owned rows; returns ``[B, owned, C_coarse]``."""
        pooled = coarse_restrict(qkv, L["phi_rows"], L["phi_cols"], L["phi_mean"],
                                 self.layout.n0, 1)
        pooled = shared_sum(pooled, self.comm, self._counter)
        hs = self.head_groups()[1]
        q0, k0, v0 = (split_heads(c, self.heads)[:, hs] for c in pooled.chunk(3, dim=-1))
        q = split_heads(qkv.chunk(3, dim=-1)[0], self.heads)[:, hs]
        return merge_heads(self.prolong(self.coarse_attention(q0, k0, v0), q, k0, L,
                                        qkv.shape[1]))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", ranks={self.comm.Get_size()}, ghosts={self.ghosts}"
