"""Checkpoints of the neural operators: the model's ``config``, its parameters and the training
state, written atomically, so that a run resumes where it stopped and a model is rebuilt from the
file alone.

One ``torch.save`` file: ``format``, ``version``, ``config`` (:attr:`~ddlearn.nn.model.NeuralOperator.config`, or
any model's constructor settings with a ``kind``), ``state`` (parameters) and ``extra`` (epoch,
optimiser and scheduler state, history, normalisation, data record). Written to a temporary file
beside the target and renamed over it: an interrupted write leaves the previous checkpoint.
"""
from __future__ import annotations

import os

import torch

from ..decomposition.atomic import atomic_write

__all__ = ["save_checkpoint", "load_checkpoint", "check_compatible", "read_payload", "FORMAT"]

FORMAT = "ddlearn-nn-checkpoint"
VERSION = 1


def read_payload(path: str, fmt: str, version: int, what: str) -> dict:
    """The dict saved at ``path`` (tensors and plain types only), checked to carry
    ``format == fmt`` and ``version``: the one reader of every torch file ddlearn writes.

    Raises
    ------
    ValueError
        For a truncated or foreign file, another format or another version, naming ``what``.
    """
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise ValueError(f"{path} is not a readable {what} ({e})") from e
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        raise ValueError(f"{path} is not a {what}")
    if payload.get("version") != version:
        raise ValueError(f"{path} has {what} version {payload.get('version')}; this ddlearn "
                         f"reads version {version}")
    return payload


def save_checkpoint(path: str, model: torch.nn.Module, **extra) -> None:
    """Write ``model.config``, its ``state_dict`` and ``extra`` to ``path`` atomically."""
    payload = {"format": FORMAT, "version": VERSION, "config": model.config,
               "state": model.state_dict(), "extra": extra}
    atomic_write(path, lambda f: torch.save(payload, f))


def check_compatible(path: str, saved: dict, wanted: dict) -> None:
    """Raise when a checkpoint's config ``saved`` is not the configuration ``wanted``: a
    checkpoint of another mixer, layout or size must not be resumed into this run.

    Raises
    ------
    ValueError
        Naming every entry that differs and the fix.
    """
    keys = sorted(set(saved) | set(wanted))
    diff = [f"{k}: file has {saved.get(k)!r}, this run {wanted.get(k)!r}" for k in keys
            if saved.get(k) != wanted.get(k)]
    if diff:
        raise ValueError(f"checkpoint {path} was made for another model or layout ("
                         + "; ".join(diff) + "): choose another output folder, or delete the "
                         "file to start afresh")


def load_checkpoint(path: str, expect: dict | None = None) -> dict:
    """Read a checkpoint; with ``expect`` (a config), check it first (:func:`check_compatible`).

    Raises
    ------
    ValueError
        For a missing file, a file that is not a ddlearn.nn checkpoint (of this version), or
        another config.
    """
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint at {path}")
    payload = read_payload(path, FORMAT, VERSION, FORMAT + " file")
    if expect is not None:
        check_compatible(path, payload["config"], expect)
    return payload
