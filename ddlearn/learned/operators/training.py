r"""Training a learned operator on ``(f, u)`` pairs with :class:`ddlearn.nn.trainer.Trainer`:
Adam, cosine learning-rate schedule, relative :math:`L^2` loss
:math:`\frac1B\sum_b \|M f_b - u_b\|/\|u_b\|`, validation curve, early stopping, divergence
detection, checkpoints and resume (settings :class:`ddlearn.nn.trainer.TrainConfig`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from ...nn.trainer import Trainer, TrainConfig, relative_error
from . import checkpoint as ckpt_io
from ...nn.comm import allreduce_sum

__all__ = ["History", "TrainResult", "fit_scale", "evaluate", "train"]


@dataclass
class History:
    """Curves recorded at every evaluation."""

    step: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    val_error: list = field(default_factory=list)
    test_error: list = field(default_factory=list)
    seconds: list = field(default_factory=list)

    def first_below(self, threshold: float, key: str = "test_error"):
        """``(step, seconds)`` of the first evaluation with ``key`` at or below ``threshold``,
        or ``(None, None)``."""
        for s, t, e in zip(self.step, self.seconds, getattr(self, key)):
            if e <= threshold:
                return s, t
        return None, None


@dataclass
class TrainResult:
    history: History
    best_step: int
    best_val: float
    final_test: float
    stopped: str
    seconds: float
    steps: int


@torch.no_grad()
def fit_scale(model, data, comm=None) -> float:
    r"""Rescale a Schwarz-attention model so that its output has the least-squares size of the
    targets: :math:`M \leftarrow \alpha M`, :math:`\alpha = \langle Mf, u\rangle /
    \langle Mf, Mf\rangle` over ``data``. A data-aware initialisation: a random operator's output
    can be orders of magnitude away from the solutions' size (the coarse term sums
    :math:`\Phi^T f` over whole subdomains). The factors :math:`Q_i, Q_0` are scaled by
    :math:`\alpha`, or by :math:`\sqrt\alpha` when :math:`K = Q`; a symmetric model is left
    alone if :math:`\alpha \le 0`. Returns :math:`\alpha`."""
    pred = model(data.F.to(model.Q.dtype))
    sums = torch.stack([(pred * data.U).sum(), (pred * pred).sum()]).double()
    if comm is not None:
        sums = allreduce_sum(sums, comm)
    alpha = float(sums[0] / sums[1])
    symmetric = model.K is model.Q
    if symmetric and alpha <= 0:
        return alpha
    factor = alpha ** 0.5 if symmetric else alpha
    for name in ("Q", "Q0"):
        if getattr(model, name, None) is not None:
            getattr(model, name).mul_(factor)
    return alpha


@torch.no_grad()
def evaluate(model, data, batch: int = 512, comm=None) -> float:
    """Mean relative error of ``model`` on a :class:`~ddlearn.learned.operators.data.Dataset`."""
    total = 0.0
    for s in range(0, len(data), batch):
        F, U = data.F[s:s + batch], data.U[s:s + batch]
        total += float(relative_error(model(F), U, _reduce(comm)).mean()) * F.shape[0]
    return total / len(data)


def train(model, splits, cfg: TrainConfig | None = None, *, problem: dict | None = None,
          resume: str | None = None, until: int | None = None, comm=None) -> TrainResult:
    """Train ``model`` on ``splits`` and leave it in its best-validation state
    (:class:`ddlearn.nn.trainer.Trainer`: Adam, cosine schedule, loss :func:`relative_error` of
    batches of ``cfg.batch_size`` drawn from a generator seeded with ``cfg.seed``).

    ``resume`` continues from a checkpoint written by this function (same model configuration),
    restoring the current parameters, optimizer, schedule, sampler state, step and history, so
    that an interrupted run resumed ends exactly where the uninterrupted one would. ``until``
    pauses at that step (the schedule still spans ``cfg.steps``). The checkpoint's ``state`` is the
    best-validation state (what :func:`ddlearn.learned.operators.checkpoint.load` returns); ``current_state``
    is where training stood.

    Distributed (``comm``, an mpi4py communicator): ``model`` maps each rank's rows to its rows
    (:class:`~ddlearn.learned.operators.distributed.DistributedSchwarzAttention`), ``splits`` hold each rank's
    rows of the same samples, every rank draws the same batches and the loss is reduced across
    ranks, so each rank's optimizer takes exactly the steps the serial one takes on its slice.
    Save such a model with its own collective ``save``.
    """
    cfg = cfg or TrainConfig()
    if comm is not None and (cfg.checkpoint or resume):
        raise ValueError("checkpoints during distributed training are not supported: train, then "
                         "call the distributed model's save(path), which any rank count loads")
    dtype = next(model.parameters()).dtype
    train_set, val_set, test_set = (d.to(dtype) for d in (splits.train, splits.val, splits.test))
    gen = torch.Generator().manual_seed(cfg.seed)
    reduce = _reduce(comm)

    def loss(step):
        idx = torch.randint(len(train_set), (cfg.batch_size,), generator=gen)
        return relative_error(model(train_set.F[idx]), train_set.U[idx], reduce).mean()

    def metrics():
        return {"val_error": evaluate(model, val_set, comm=comm),
                "test_error": evaluate(model, test_set, comm=comm)}

    def save(trainer):
        state = trainer.state()
        ckpt_io.save(cfg.checkpoint, model, state=trainer.best.state,
                     problem=problem,
                     current_state=state["current_state"], optimizer=state["optimizer"],
                     scheduler=state["scheduler"], sampler=gen.get_state(), step=state["step"],
                     history=state["history"], seconds=state["seconds"], data=splits.meta,
                     train_config=asdict(cfg))

    def every(trainer):
        if cfg.checkpoint and cfg.checkpoint_every and trainer.step % cfg.checkpoint_every == 0:
            save(trainer)

    trainer = Trainer(model, cfg, loss, metrics, monitor="val_error",
                      rank=0 if comm is None else comm.Get_rank(), on_evaluation=every)
    if resume is not None:
        loaded, c = ckpt_io.load(resume, problem=problem)
        if ckpt_io.architecture(loaded.config) != ckpt_io.architecture(model.config):
            raise ValueError(f"cannot resume from {resume}: it holds a {loaded.config} model, "
                             f"not {model.config}")
        hist = c["history"]
        best_val = min(hist["val_error"], default=math.inf)
        trainer.load_state({**c, "best": {
            "state": c["state"], "value": best_val,
            "step": hist["step"][hist["val_error"].index(best_val)] if hist["val_error"] else 0}})
        gen.set_state(c["sampler"])
    trainer.history = {**asdict(History()), **trainer.history}
    stopped = trainer.run(until)
    if cfg.checkpoint:
        save(trainer)
    trainer.restore_best()
    return TrainResult(history=History(**trainer.history), best_step=trainer.best.step,
                       best_val=trainer.best.value,
                       final_test=evaluate(model, test_set, comm=comm), stopped=stopped,
                       seconds=trainer.elapsed, steps=trainer.step)


def _reduce(comm):
    """The differentiable sum over the ranks of ``comm`` (``None`` serially)."""
    return None if comm is None else (lambda t: allreduce_sum(t, comm))
