r"""The one training loop of ddlearn's learned models: operator learning, the neural operators'
mixers and the learned coarse spaces.

A :class:`Trainer` takes steps :math:`\theta \leftarrow \mathrm{opt}(\theta, \nabla_\theta
\ell(\theta))` with the optimiser and learning-rate schedule named in its :class:`TrainConfig`
and calls three hooks: ``loss(step)`` (the scalar :math:`\ell` of one batch, drawn by the hook
itself, so that the hook owns its random stream), ``evaluate()`` (a dict of metrics) and
``communicate(params, loss)`` (e.g. an all-reduce of the gradients over ranks; returns the
loss every rank reports). What is kept is decided in one place: the *best-state rule*
(:class:`BestState`: the state with the lowest monitored metric, ties to the earlier state),
early stopping (``patience``), a target, divergence detection, the progress bar and the state a
checkpoint needs to resume a run exactly (:meth:`Trainer.state`, :meth:`Trainer.load_state`).
Torch only: communication comes in as a callable.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

__all__ = ["CLOCKS", "OPTIMIZERS", "SCHEDULES", "TrainConfig", "BestState", "StopTraining",
           "Trainer", "relative_error", "progress_bar", "cosine_schedule"]

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}
OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("cosine", "one-cycle", "constant")


@dataclass
class TrainConfig:
    r"""Optimisation settings of :class:`Trainer`.

    ``optimizer``: ``"adam"`` or ``"adamw"`` (with ``weight_decay``); ``schedule``:
    ``"cosine"`` from ``lr`` to ``lr_final`` over ``steps`` (:func:`cosine_schedule`) or
    ``"one-cycle"`` (peak ``lr``, :class:`torch.optim.lr_scheduler.OneCycleLR`) or
    ``"constant"`` (each parameter group's own rate throughout); gradients
    clipped to norm ``clip`` when given. ``patience``: stop after this many evaluations without
    a better monitored metric. ``target``: stop once it is at or below the target.
    ``divergence``: a training loss that is not finite or exceeds ``divergence`` times
    :math:`\max(\ell_1, 1)` (the first loss, or 1, the relative error of the zero operator,
    whichever is larger, so that the early noise of a good, data-aware initialisation does not
    count as divergence) stops training and restores the best state; ``None`` never stops.
    ``clock``: ``"wall"`` (:func:`time.perf_counter`) or ``"process"``
    (:func:`time.process_time`, the CPU seconds of this process: the measure to use on a
    machine shared with other jobs) for the recorded seconds. ``batch_size``, ``checkpoint`` and
    ``checkpoint_every`` are read by the loss hook and the checkpointing caller. ``epochs``: the
    budget in passes over the training set, for a loss hook that walks the training set in
    epochs (:func:`ddlearn.nn.train.fit`); :meth:`for_epochs` turns it into ``steps``.
    """

    steps: int = 2000
    epochs: int | None = None
    batch_size: int = 64
    lr: float = 1e-2
    lr_final: float = 1e-4
    optimizer: str = "adam"
    weight_decay: float = 0.0
    schedule: str = "cosine"
    clip: float | None = None
    eval_every: int = 20
    patience: int | None = None
    target: float | None = None
    divergence: float | None = 1e3
    seed: int = 0
    progress: bool = True
    checkpoint: str | None = None
    checkpoint_every: int = 0
    clock: str = "wall"

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps, batch_size and eval_every must be positive")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be positive (or None: a budget in steps), got "
                             f"{self.epochs}")
        if not (self.lr > 0 and self.lr_final > 0):
            raise ValueError("learning rates must be positive")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {self.clock!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    def for_epochs(self, batches: int) -> "TrainConfig":
        """These settings for epochs of ``batches`` steps: ``steps = epochs * batches``, one
        evaluation per epoch (``eval_every = batches``).

        Raises
        ------
        ValueError
            When ``epochs`` is not given.
        """
        if self.epochs is None:
            raise ValueError("this loop trains in epochs: give TrainConfig(epochs=...) (for "
                             "ddlearn.nn.train.fit: dataclasses.replace(FIT, epochs=...))")
        return replace(self, steps=self.epochs * batches, eval_every=batches)


def relative_error(pred: torch.Tensor, target: torch.Tensor, reduce=None) -> torch.Tensor:
    r"""Per-sample relative :math:`L^2` error :math:`\|p_b-t_b\|/\|t_b\|` over all but the
    first axis (a vector of length :math:`B`; ``.mean()`` is the loss).

    ``reduce``: a differentiable sum across ranks (e.g. an autograd all-reduce) applied to the
    stacked squared norms, when the entries of each sample are spread over ranks: every rank
    then gets the same global value.
    """
    dims = tuple(range(1, target.dim()))
    sq = torch.stack([(pred - target).square().sum(dims), target.square().sum(dims)])
    if reduce is not None:
        sq = reduce(sq)
    return torch.sqrt(sq[0] / sq[1])


def cosine_schedule(lr: float, lr_final: float, steps: int):
    r"""The factor of the learning rate at step :math:`k` (for ``LambdaLR``):
    :math:`\rho + (1-\rho)\tfrac12(1+\cos(\pi\min(k, B)/B))`, :math:`\rho` =
    ``lr_final / lr``, :math:`B` = ``steps``."""
    ratio = lr_final / lr
    return lambda k: ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * min(k, steps) / steps))


def progress_bar(show: bool, total: int, desc: str, rank: int = 0, initial: int = 0):
    """A tqdm bar on rank 0 when ``show`` (``None`` elsewhere): one bar per run, not one per
    rank."""
    if not show or rank != 0:
        return None
    return tqdm(total=total, initial=initial, desc=desc, unit="step", leave=False)


class BestState:
    """The best evaluated state of a module seen so far: lower ``value`` is better and a tie
    keeps the earlier state (the best-state rule of every trainer)."""

    def __init__(self, module, value: float = math.inf, step: int = 0, state=None):
        self.module, self.value, self.step = module, value, step
        self.state = copy.deepcopy(module.state_dict() if state is None else state)

    def offer(self, value: float, step: int) -> bool:
        """Keep the module's current state if ``value`` beats the best; returns whether it did."""
        if not value < self.value:
            return False
        self.value, self.step = value, step
        self.state = copy.deepcopy(self.module.state_dict())
        return True

    def restore(self) -> None:
        self.module.load_state_dict(self.state)


class StopTraining(Exception):
    """Raised by a loss hook to end training with the best state kept; its message says why."""


def _optimizer(cfg: TrainConfig, params):
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _scheduler(cfg: TrainConfig, opt):
    if cfg.schedule == "one-cycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps)
    if cfg.schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(opt, cosine_schedule(cfg.lr, cfg.lr_final,
                                                                  cfg.steps))


class Trainer:
    r"""Train ``model`` with the settings ``cfg`` and the hooks.

    Parameters
    ----------
    model : torch.nn.Module
        Whose state the best-state rule keeps and restores.
    cfg : TrainConfig
    loss : callable
        ``loss(step) -> tensor``: the scalar loss of step ``step`` (0-based); it may raise
        :class:`StopTraining` (e.g. a factorisation that failed on every rank).
    evaluate : callable
        ``evaluate() -> dict`` of metrics, called every ``cfg.eval_every`` steps and at the last.
    monitor : str or None
        The metric of ``evaluate`` that the best-state rule, ``patience`` and ``target`` use
        (``None``: no best state is kept, training ends in its last state).
    communicate : callable, optional
        ``communicate(params, loss_value) -> loss_value`` after the backward pass (e.g. sum the
        gradients over ranks and return the global loss).
    params : list or list of dicts, optional
        The optimiser's parameter groups (default all of ``model``'s parameters).
    rank : int
        This process's rank: only rank 0 shows a progress bar.
    on_evaluation : callable, optional
        ``on_evaluation(trainer)`` after each evaluation has been recorded (checkpoints).
    """

    def __init__(self, model, cfg: TrainConfig, loss, evaluate, *, monitor: str = "val",
                 communicate=None, params=None, rank: int = 0, desc: str = "training",
                 on_evaluation=None):
        self.model, self.cfg, self.monitor = model, cfg, monitor
        self._loss, self._evaluate, self._communicate = loss, evaluate, communicate
        self._on_evaluation, self.rank, self.desc = on_evaluation, rank, desc
        self.params = list(model.parameters()) if params is None else params
        self.optimizer = _optimizer(cfg, self.params)
        self.scheduler = _scheduler(cfg, self.optimizer)
        self.history: dict[str, list] = {}
        self.step, self.elapsed = 0, 0.0
        self.best = BestState(model)
        self.stopped = "steps"

    # -- the state a checkpoint carries ------------------------------------------------------
    def state(self) -> dict:
        """Where training stands: current parameters, optimiser, schedule, step, history,
        seconds and the best state (its parameters, value and step)."""
        return {"current_state": copy.deepcopy(self.model.state_dict()),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": self.step,
                "history": copy.deepcopy(self.history), "seconds": self.elapsed,
                "best": {"state": self.best.state, "value": self.best.value,
                         "step": self.best.step}}

    def load_state(self, state: dict) -> None:
        """Continue from :meth:`state` (a resumed run ends exactly where the uninterrupted one
        would)."""
        self.model.load_state_dict(state["current_state"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step, self.elapsed = state["step"], state["seconds"]
        self.history = copy.deepcopy(state["history"])
        best = state.get("best")
        if best is not None:
            self.best = BestState(self.model, best["value"], best["step"], best["state"])

    def offer_initial(self, record: bool = False) -> dict:
        """Evaluate the state training starts from and make it the best so far (a meaningful
        baseline, e.g. the classical coarse space a learned one corrects); ``record``: enter it
        in the history (loss NaN)."""
        metrics = self._evaluate()
        if record:
            self._record(self.step, math.nan, metrics)
        self.best = BestState(self.model, metrics[self.monitor], self.step)
        return metrics

    def _record(self, step, loss, metrics):
        for key, value in {"step": step, "train_loss": loss, **metrics,
                           "seconds": self.elapsed}.items():
            self.history.setdefault(key, []).append(value)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, until: int | None = None) -> str:
        """Train until ``cfg.steps`` (or step ``until``, a pause: the schedule still spans
        ``cfg.steps``), early stop, the target or divergence; leave the model in its best
        state. Returns why it stopped."""
        cfg, model = self.cfg, self.model
        stop_at = cfg.steps if until is None else min(until, cfg.steps)
        bar = progress_bar(cfg.progress, cfg.steps, self.desc, self.rank, self.step)
        clock = CLOCKS[cfg.clock]
        t0 = clock() - self.elapsed
        first_loss, since_best, stopped = None, 0, "steps"
        while self.step < stop_at:
            try:
                loss = self._loss(self.step)
            except StopTraining as stop:
                stopped = str(stop)
                break
            lv = float(loss.detach())
            first_loss = lv if first_loss is None else first_loss
            if cfg.divergence is not None and (
                    not math.isfinite(lv) or lv > cfg.divergence * max(first_loss, 1.0)):
                stopped = f"diverged at step {self.step + 1} (loss {lv:.3g}); best state kept"
                break
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self._communicate is not None:
                lv = self._communicate(self.params, lv)
            if cfg.clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
            if bar is not None:
                bar.update(1)
            if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                self.elapsed = clock() - t0
                metrics = self._evaluate()
                self._record(self.step, lv, metrics)
                if bar is not None:
                    # an evaluation's own "loss" (e.g. the epoch's mean) wins over the step's
                    bar.set_postfix({"loss": f"{lv:.2e}", **{k: f"{v:.2e}" for k, v in
                                                           metrics.items() if v is not None}})
                if self.monitor is not None:
                    value = metrics[self.monitor]
                    since_best = 0 if self.best.offer(value, self.step) else since_best + 1
                if self._on_evaluation is not None:
                    self._on_evaluation(self)
                if self.monitor is None:
                    continue
                if cfg.target is not None and value <= cfg.target:
                    stopped = f"reached validation error {value:.3g} <= {cfg.target:g}"
                    break
                if cfg.patience is not None and since_best >= cfg.patience:
                    stopped = (f"early stop: no validation improvement in {cfg.patience} "
                               f"evaluations")
                    break
        if stopped == "steps" and self.step < cfg.steps:
            stopped = f"paused at step {self.step}"
        if bar is not None:
            bar.close()
        self.elapsed = clock() - t0
        self.stopped = stopped
        return stopped

    def restore_best(self) -> None:
        """Leave the model in its best state."""
        self.best.restore()
