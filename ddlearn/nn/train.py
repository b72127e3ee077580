r"""Training the neural operators: relative :math:`L^2` loss, AdamW with a one-cycle schedule
(as the published operator-learning baselines train), checkpoints every epoch, resume.

The loss of a batch is the mean over samples of

.. math:: \|u_\theta(a) - u\|_2 / \|u\|_2,

on the normalised scale the model predicts: inputs :math:`\log a` and targets :math:`u` are
shifted and scaled by their training-set means and standard deviations (one scalar each, so
that a model runs on another resolution of the same problem).
:func:`ddlearn.nn.trainer.relative_error` measures the same error in physical units. The loop is
:class:`ddlearn.nn.trainer.Trainer`'s.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict

import numpy as np
import torch

from . import checkpoint as ckpt_io
from .trainer import Trainer, TrainConfig, relative_error

__all__ = ["FIT", "Normalizer", "fit", "predict", "parameter_count", "training_device"]

#: :func:`fit`'s settings: ``epochs`` passes over the training set in batches of ``batch_size``,
#: AdamW (``lr`` the one-cycle peak, ``weight_decay``), gradients clipped to norm ``clip``, no
#: divergence stop; ``seed`` fixes initialisation and shuffling. A run changes what it needs:
#: ``dataclasses.replace(FIT, epochs=6, lr=3e-3)``.
FIT = TrainConfig(epochs=20, batch_size=8, lr=1e-3, optimizer="adamw", weight_decay=1e-4,
                  schedule="one-cycle", clip=1.0, divergence=None)

#: settings a checkpoint does not record: ``steps`` and ``eval_every`` follow from ``epochs``,
#: the others do not change the run (a resumed run may show its progress differently)
_NOT_RECORDED = ("steps", "eval_every", "progress", "checkpoint", "checkpoint_every", "clock")


class Normalizer:
    r"""Scalar affine maps :math:`a\mapsto(\log a-\mu_a)/\sigma_a`, :math:`u\mapsto(u-\mu_u)
    /\sigma_u` fitted on the training set (``log_input``: take :math:`\log_{10}` of the input
    first, for coefficients spanning decades)."""

    def __init__(self, inputs: np.ndarray, targets: np.ndarray, log_input: bool = True):
        a = np.log10(inputs) if log_input else inputs
        self.state = {"log_input": bool(log_input), "a_mean": float(a.mean()),
                      "a_std": float(a.std()) or 1.0, "u_mean": float(targets.mean()),
                      "u_std": float(targets.std()) or 1.0}

    @classmethod
    def from_state(cls, state: dict) -> "Normalizer":
        self = cls.__new__(cls)
        self.state = dict(state)
        return self

    def inputs(self, a: np.ndarray) -> torch.Tensor:
        s = self.state
        a = np.log10(a) if s["log_input"] else a
        return torch.as_tensor((a - s["a_mean"]) / s["a_std"])

    def targets(self, u: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((u - self.state["u_mean"]) / self.state["u_std"])

    def physical(self, v: torch.Tensor) -> torch.Tensor:
        return v * self.state["u_std"] + self.state["u_mean"]


def training_device(spec: str) -> torch.device:
    """The device a model trains on, from a command line's ``--device`` (``cpu``, ``cuda``,
    ``cuda:N``); a ``ValueError`` naming the valid values when torch cannot use it."""
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise ValueError(f"--device {spec}: not a device name torch knows; use cpu, cuda or "
                         "cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {spec}: not a device this study trains on; use cpu, cuda "
                         "or cuda:N")
    if device.type == "cuda" and not (torch.cuda.is_available()
                                      and (device.index or 0) < torch.cuda.device_count()):
        raise ValueError(f"--device {spec}: this torch ({torch.__version__}) sees "
                         f"{torch.cuda.device_count()} CUDA device(s); use --device cpu")
    return device


def parameter_count(module: torch.nn.Module) -> int:
    """Real parameters of ``module`` (a complex entry, as in FNO's spectral weights, counts
    twice): what the study equalises."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in module.parameters())


def _fields(x: np.ndarray) -> np.ndarray:
    """``[S, *grid]`` -> ``[S, T, 1]``."""
    return x.reshape(len(x), -1, 1)


@torch.no_grad()
def predict(model, coefficient: np.ndarray, coords: np.ndarray, norm: Normalizer,
            batch_size: int = 16) -> torch.Tensor:
    """The model's solutions in physical units, ``[S, T]``, float64, on the CPU (the model runs
    on the device of its parameters)."""
    model.eval()
    p = next(model.parameters())
    c = torch.as_tensor(coords, dtype=p.dtype, device=p.device)
    a = norm.inputs(_fields(coefficient)).to(p.device, p.dtype)
    out = [norm.physical(model(a[i:i + batch_size], c)[..., 0].double()).cpu()
           for i in range(0, len(a), batch_size)]
    return torch.cat(out)


def fit(model, train, test, coords: np.ndarray, config: TrainConfig = FIT,
        checkpoint: str | None = None, progress: bool | None = None, log_input: bool = True,
        eval_every: int = 1, describe: dict | None = None, callback=None) -> dict:
    """Train ``model`` (``model(fields [B, T, 1], coords [T, dim])``) on ``train`` (``.coefficient``
    and ``.solution``, ``[S, *grid]``) and evaluate on ``test`` every ``eval_every`` epochs and
    at the last, with the settings ``config`` (:data:`FIT` unless given; its budget in
    ``epochs``, :meth:`~ddlearn.nn.trainer.TrainConfig.for_epochs`); resume from ``checkpoint``
    (default ``config.checkpoint``) when it exists and holds the same model and training
    settings. ``progress``: show a bar (default ``config.progress``). ``callback(entry)`` is
    called after every epoch, once its checkpoint is written (an exception there stops the run
    and leaves a checkpoint to resume from).

    Returns
    -------
    dict
        ``history`` (per epoch: train loss, test relative L2 where evaluated, seconds),
        ``test_error`` (mean relative L2 at the end, physical units), ``seconds_per_epoch``
        (median), ``parameters``, ``normalizer``.

    Raises
    ------
    ValueError
        For settings without ``epochs``, or a checkpoint of another model, layout or training
        configuration.
    """
    checkpoint = checkpoint or config.checkpoint
    torch.manual_seed(config.seed)
    norm = Normalizer(train.coefficient, train.solution, log_input)
    p = next(model.parameters())  # the data goes where the model is (CPU or a GPU)
    a = norm.inputs(_fields(train.coefficient)).to(p.device, p.dtype)
    u = norm.targets(_fields(train.solution)).to(p.device, p.dtype)
    c = torch.as_tensor(coords, dtype=p.dtype, device=p.device)
    per_epoch = math.ceil(len(a) / config.batch_size)
    settings = config.for_epochs(per_epoch)
    if progress is not None:
        settings.progress = progress
    record = {k: v for k, v in asdict(config).items() if k not in _NOT_RECORDED}
    wanted = {"model": model.config, "train": record, "data": describe or {}}
    history, epoch = [], {"batches": [], "total": 0.0, "start": 0.0}

    def loss(step):
        if step % per_epoch == 0:  # a new epoch: a new shuffle of the training set
            model.train()
            # the shuffle is drawn on the CPU: the same batches on every device
            epoch.update(batches=torch.randperm(len(a)).split(config.batch_size), total=0.0,
                         start=time.perf_counter())
        b = epoch["batches"][step % per_epoch].to(a.device)
        value = relative_error(model(a[b], c), u[b]).mean()
        epoch["total"] += value.item() * len(b)
        return value

    def evaluate():
        entry = {"epoch": len(history) + 1, "loss": epoch["total"] / len(a),
                 "seconds": time.perf_counter() - epoch["start"]}
        if entry["epoch"] % eval_every == 0 or entry["epoch"] == config.epochs:
            pred = predict(model, test.coefficient, coords, norm)
            entry["test_error"] = float(relative_error(pred, torch.as_tensor(
                test.solution.reshape(len(test.solution), -1))).mean())
        history.append(entry)
        return {"loss": entry["loss"], "test": entry.get("test_error")}

    def after_epoch(trainer):
        if checkpoint:
            ckpt_io.save(checkpoint, model.config, model.state_dict(), epoch=len(history),
                         history=history, optimizer=trainer.optimizer.state_dict(),
                         scheduler=trainer.scheduler.state_dict(), rng=torch.get_rng_state(),
                         normalizer=norm.state, train=record, data=describe or {})
        if callback is not None:
            callback(history[-1])

    trainer = Trainer(model, settings, loss, evaluate, monitor=None,
                      desc=model.config.get("mixer", "model"), on_evaluation=after_epoch)
    if checkpoint and os.path.exists(checkpoint):
        saved = ckpt_io.load(checkpoint)
        from_file = {"model": saved["config"], "train": saved["extra"]["train"],
                     "data": saved["extra"]["data"]}
        ckpt_io.check_compatible(checkpoint, from_file, wanted)
        history.extend(saved["extra"]["history"])
        trainer.load_state({"current_state": saved["state"],
                            "optimizer": saved["extra"]["optimizer"],
                            "scheduler": saved["extra"]["scheduler"],
                            "step": saved["extra"]["epoch"] * per_epoch, "history": {},
                            "seconds": 0.0})
        torch.set_rng_state(saved["extra"]["rng"])
    trainer.run()
    return {"history": history, "test_error": history[-1].get("test_error"),
            "seconds_per_epoch": float(np.median([h["seconds"] for h in history]))
            if history else None,
            "parameters": parameter_count(model),
            "normalizer": norm.state}
