r"""A training-speed protocol: learning-rate sweep on validation error, then a ladder of step
budgets, each its own cosine schedule.

One *run* at budget :math:`B` builds a fresh model (fixed seed), optionally initialises it from
the training data (:func:`~ddlearn.learned.operators.data_init.data_init`), trains :math:`B` Adam steps with
the learning rate decaying as :math:`\eta_k = \eta\,(\rho + (1-\rho)\tfrac12(1+\cos(\pi k/B)))`,
:math:`\rho = 1/100`, keeps the best-validation state and records its relative test error and the
seconds of initialisation plus training (evaluations included), by default CPU seconds of
this process (:func:`time.process_time`; single-threaded runs): on a machine shared with other
jobs, wall-clock time measures the neighbours as much as the model. Budget 0 is the
initialisation alone. The *smallest budget* reaching a test error :math:`\tau` is the first rung
of the ladder whose run ends at or below :math:`\tau`; the ladder stops as soon as every
threshold has been reached, so larger budgets are not run (they are not needed to answer the
question), and, with ``patience`` :math:`p`, once :math:`p` consecutive rungs have not lowered the
best validation error of the rungs before them (a plateau: the thresholds not reached by then
are reported as not reached within the ladder). Steps are deterministic for fixed seeds; seconds
are measurements.
"""
from __future__ import annotations

from .data_init import data_init
from ...nn.trainer import CLOCKS, TrainConfig
from .training import evaluate, train

__all__ = ["budget_run", "lr_sweep", "budget_ladder"]


def budget_run(factory, splits, budget: int, lr: float, *, seed: int = 0, init: bool = True,
               batch_size: int = 64, evaluations: int = 20, clock: str = "process") -> dict:
    """One run of the protocol: ``factory(seed)`` builds the model, ``init`` applies
    :func:`~ddlearn.learned.operators.data_init.data_init`, then ``budget`` steps of Adam (cosine schedule
    from ``lr`` to ``lr/100``) with ``evaluations`` evenly spaced validation checks; the
    best-validation state is kept. ``clock``: ``"process"`` or ``"wall"``
    (:class:`~ddlearn.nn.trainer.TrainConfig`).

    Returns ``budget, lr, seed, params, val_error, test_error, init_s, seconds`` (``seconds``:
    initialisation plus training, evaluations included) and ``steps_per_s``."""
    if budget < 0:
        raise ValueError(f"budget must be a non-negative number of steps, got {budget}")
    if evaluations < 1:
        raise ValueError(f"evaluations must be positive, got {evaluations}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    model = factory(seed)
    t0 = CLOCKS[clock]()
    if init:
        data_init(model, splits.train, seed=seed)
    init_s = CLOCKS[clock]() - t0
    rec = {"budget": budget, "lr": lr, "seed": seed, "params": model.num_parameters(),
           "init_s": init_s, "steps_per_s": None}
    if budget == 0:
        return rec | {"val_error": evaluate(model, splits.val),
                      "test_error": evaluate(model, splits.test), "seconds": init_s}
    cfg = TrainConfig(steps=budget, batch_size=batch_size, lr=lr, lr_final=lr / 100,
                      eval_every=max(1, budget // evaluations), seed=seed, progress=False,
                      clock=clock)
    res = train(model, splits, cfg)
    return rec | {"val_error": res.best_val, "test_error": res.final_test,
                  "seconds": init_s + res.seconds, "steps_per_s": res.steps / res.seconds,
                  "stopped": res.stopped}


def lr_sweep(factory, splits, lrs, budget: int, **kw) -> tuple[float, list[dict]]:
    """Runs at ``budget`` for every learning rate in ``lrs``; returns the one with the lowest
    validation error (the first on a tie) and all runs. ``kw`` go to :func:`budget_run`."""
    if not lrs:
        raise ValueError("lr_sweep needs at least one learning rate")
    runs = [budget_run(factory, splits, budget, lr, **kw) for lr in lrs]
    return min(runs, key=lambda r: r["val_error"])["lr"], runs


def budget_ladder(factory, splits, budgets, thresholds, lr: float, patience: int | None = None,
                  **kw) -> dict:
    """The smallest budget in ``budgets`` (ascending) whose run reaches each test-error
    threshold, in steps and in the seconds of that run.

    ``patience``: stop after this many consecutive rungs without a lower validation error than
    every rung before (``None``: run until every threshold is reached or the ladder ends).
    Returns ``{"runs": [...], "reached": {str(tau): {"steps", "seconds", "test_error"} or
    None}, "stopped": reason}``; ``None`` means no budget run reached ``tau``. ``kw`` go to
    :func:`budget_run`."""
    budgets = list(budgets)
    if not budgets or budgets != sorted(set(budgets)):
        raise ValueError(f"budgets must be a non-empty strictly increasing list, got {budgets}")
    if not thresholds:
        raise ValueError("budget_ladder needs at least one threshold")
    if patience is not None and patience < 1:
        raise ValueError(f"patience must be positive or None, got {patience}")
    reached = {str(t): None for t in thresholds}
    runs, best_val, stale, stopped = [], float("inf"), 0, "ladder end"
    for b in budgets:
        r = budget_run(factory, splits, b, lr, **kw)
        runs.append(r)
        for t in thresholds:
            if reached[str(t)] is None and r["test_error"] <= t:
                reached[str(t)] = {"steps": b, "seconds": r["seconds"], "test_error": r["test_error"]}
        stale = 0 if r["val_error"] < best_val else stale + 1
        best_val = min(best_val, r["val_error"])
        if all(v is not None for v in reached.values()):
            stopped = "all thresholds reached"
            break
        if patience is not None and stale >= patience:
            stopped = f"plateau: {patience} rungs without a lower validation error"
            break
    return {"runs": runs, "reached": reached, "stopped": stopped}
