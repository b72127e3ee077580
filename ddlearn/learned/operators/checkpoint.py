"""Checkpoints of the operator-learning models that rebuild their model, in the one format of
:mod:`ddlearn.nn.checkpoint`: the model's ``config`` (kind, grid or n, N, overlap, ranks, coarse
space, dtype, seed), its ``state``, the ``problem`` it was trained on and any extra entries
(optimizer and scheduler state, step, history, data settings), written atomically.
"""
from __future__ import annotations

import os

import torch

from ...nn import checkpoint as nn_checkpoint
from ...nn.registry import MODELS

__all__ = ["save", "load", "build_model", "architecture"]


def architecture(config: dict) -> dict:
    """The config without its initialisation-only entries: two models with equal architectures
    can exchange parameters."""
    return {k: v for k, v in config.items() if k not in ("seed", "init_scale")}


def build_model(config: dict) -> torch.nn.Module:
    """Construct a fresh model from its ``config`` dict (its ``kind`` names the class in
    :data:`MODELS`)."""
    args = dict(config)
    kind = args.pop("kind", None)
    if kind not in MODELS:
        raise ValueError(f"unknown model kind {kind!r}; known kinds are {sorted(MODELS)}")
    return MODELS[kind](**args)


def save(path: str, model: torch.nn.Module, *, problem: dict | None = None, state=None,
         **extra) -> None:
    """Write ``model`` (config + parameters, or the parameters ``state`` of the same model,
    e.g. its best state) and ``extra`` entries to ``path`` atomically."""
    nn_checkpoint.save(path, model.config, model.state_dict() if state is None else state,
                       problem=problem, **extra)


def _mismatch(what, saved, wanted, path):
    raise ValueError(f"checkpoint {path} was made for {what} {saved}, not {wanted}: train a model "
                     f"for this configuration or load a checkpoint made for it")


def load(path: str, *, problem: dict | None = None, expect: dict | None = None):
    """Rebuild the model stored at ``path``; returns ``(model, checkpoint_dict)`` (``config``,
    ``state`` and the entries it was saved with).

    Parameters
    ----------
    problem : dict, optional
        ``Problem.describe()`` of the problem at hand; the checkpoint must have been made for the
        same problem name and grid.
    expect : dict, optional
        Config entries the model must have (e.g. ``{"N": 8, "overlap": 2}``).

    Raises
    ------
    FileNotFoundError, ValueError
        With a message naming the file and the mismatch.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    saved = nn_checkpoint.load(path)
    ckpt = {"config": saved["config"], "state": saved["state"], **saved["extra"]}
    saved = ckpt.get("problem") or {}
    if problem is not None:
        for key in ("name", "grid"):
            if saved.get(key) != problem.get(key):
                _mismatch(f"problem {key}", saved.get(key), problem.get(key), path)
    for key, value in (expect or {}).items():
        if ckpt["config"].get(key) != value:
            _mismatch(key, ckpt["config"].get(key), value, path)
    model = build_model(ckpt["config"])
    model.load_state_dict(ckpt["state"])
    return model, ckpt
