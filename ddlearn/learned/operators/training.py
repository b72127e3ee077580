r"""Training a learned operator on ``(f, u)`` pairs: Adam, cosine learning-rate schedule,
relative :math:`L^2` loss :math:`\frac1B\sum_b \|M f_b - u_b\|/\|u_b\|`, validation curve, early
stopping, divergence detection, checkpoints and resume.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from ..common import BestState, cosine_schedule, progress_bar
from . import checkpoint as ckpt_io
from ...nn.comm import allreduce_sum

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}

__all__ = ["TrainConfig", "History", "TrainResult", "relative_error", "fit_scale", "evaluate",
           "train"]


@dataclass
class TrainConfig:
    r"""Optimisation settings.

    ``patience``: stop after this many evaluations without a better validation error.
    ``target``: stop once the validation error is at or below it. ``divergence``: a training
    loss that is not finite or exceeds ``divergence`` times :math:`\max(\ell_1, 1)` (the first
    loss, or 1, the relative error of the zero operator, whichever is larger, so that the early
    noise of a good, data-aware initialisation does not count as divergence) stops training and
    restores the best state. ``clock``: ``"wall"`` (:func:`time.perf_counter`) or ``"process"``
    (:func:`time.process_time`, the CPU seconds of this process: the measure to use on a
    machine shared with other jobs) for the recorded seconds.
    """

    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-2
    lr_final: float = 1e-4
    eval_every: int = 20
    patience: int | None = None
    target: float | None = None
    divergence: float = 1e3
    seed: int = 0
    progress: bool = True
    checkpoint: str | None = None
    checkpoint_every: int = 0
    clock: str = "wall"

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps, batch_size and eval_every must be positive")
        if not (self.lr > 0 and self.lr_final > 0):
            raise ValueError("learning rates must be positive")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {self.clock!r}")


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


def relative_error(pred: torch.Tensor, target: torch.Tensor, comm=None) -> torch.Tensor:
    r"""Mean relative :math:`L^2` error over the batch, :math:`\frac1B\sum_b\|p_b-t_b\|/\|t_b\|`.

    With ``comm`` the rows of each sample are spread over the ranks: the squared norms are
    summed across ranks (differentiably) and every rank gets the same global value.
    """
    sq = torch.stack([((pred - target) ** 2).sum(dim=-1), (target ** 2).sum(dim=-1)])
    if comm is not None:
        sq = allreduce_sum(sq, comm)
    return torch.sqrt(sq[0] / sq[1]).mean()


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
        total += float(relative_error(model(F), U, comm)) * F.shape[0]
    return total / len(data)


def train(model, splits, cfg: TrainConfig | None = None, *, problem: dict | None = None,
          resume: str | None = None, until: int | None = None, comm=None) -> TrainResult:
    """Train ``model`` on ``splits`` and leave it in its best-validation state.

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
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_schedule(cfg.lr, cfg.lr_final, cfg.steps))
    gen = torch.Generator().manual_seed(cfg.seed)
    hist, step, elapsed = History(), 0, 0.0
    if resume is not None:
        loaded, c = ckpt_io.load(resume, problem=problem)
        if ckpt_io.architecture(loaded.config) != ckpt_io.architecture(model.config):
            raise ValueError(f"cannot resume from {resume}: it holds a {loaded.config} model, "
                             f"not {model.config}")
        model.load_state_dict(c["current_state"])
        opt.load_state_dict(c["optimizer"])
        sched.load_state_dict(c["scheduler"])
        gen.set_state(c["sampler"])
        hist, step, elapsed = History(**c["history"]), c["step"], c["seconds"]
    best_val = min(hist.val_error, default=math.inf)
    best = BestState(model, best_val,
                     hist.step[hist.val_error.index(best_val)] if hist.val_error else 0,
                     c["state"] if resume is not None else None)
    first_loss, since_best, stopped = None, 0, "steps"
    stop_at = cfg.steps if until is None else min(until, cfg.steps)

    def save(path):
        current = copy.deepcopy(model.state_dict())
        model.load_state_dict(best.state)
        ckpt_io.save(path, model, problem=problem, current_state=current,
                     optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                     sampler=gen.get_state(), step=step, history=asdict(hist),
                     seconds=elapsed, data=splits.meta, train_config=asdict(cfg))
        model.load_state_dict(current)

    bar = progress_bar(cfg.progress, cfg.steps, "training", comm, step)
    clock = CLOCKS[cfg.clock]
    t0 = clock() - elapsed
    while step < stop_at:
        idx = torch.randint(len(train_set), (cfg.batch_size,), generator=gen)
        loss = relative_error(model(train_set.F[idx]), train_set.U[idx], comm)
        lv = float(loss.detach())
        first_loss = lv if first_loss is None else first_loss
        if not math.isfinite(lv) or lv > cfg.divergence * max(first_loss, 1.0):
            stopped = f"diverged at step {step + 1} (loss {lv:.3g}); best state kept"
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        if bar is not None:
            bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            elapsed = clock() - t0
            val, test = evaluate(model, val_set, comm=comm), evaluate(model, test_set, comm=comm)
            for key, v in zip(("step", "train_loss", "val_error", "test_error", "seconds"),
                              (step, lv, val, test, elapsed)):
                getattr(hist, key).append(v)
            if bar is not None:
                bar.set_postfix(loss=f"{lv:.2e}", val=f"{val:.2e}")
            since_best = 0 if best.offer(val, step) else since_best + 1
            if cfg.checkpoint and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                save(cfg.checkpoint)
            if cfg.target is not None and val <= cfg.target:
                stopped = f"reached validation error {val:.3g} <= {cfg.target:g}"
                break
            if cfg.patience is not None and since_best >= cfg.patience:
                stopped = f"early stop: no validation improvement in {cfg.patience} evaluations"
                break
    if stopped == "steps" and step < cfg.steps:
        stopped = f"paused at step {step}"
    if bar is not None:
        bar.close()
    elapsed = clock() - t0
    if cfg.checkpoint:
        save(cfg.checkpoint)
    best.restore()
    return TrainResult(history=hist, best_step=best.step, best_val=best.value,
                       final_test=evaluate(model, test_set, comm=comm), stopped=stopped,
                       seconds=elapsed,
                       steps=step)
