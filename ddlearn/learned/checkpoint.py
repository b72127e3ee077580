"""Checkpoints that rebuild their model: construction metadata + parameters, written atomically.

A checkpoint is one ``torch.save`` file holding ``format``, ``version``, the model's ``config``
(kind, grid or n, N, overlap, ranks, coarse space, dtype, seed), its ``state``, the ``problem`` it
was trained on and any extra entries (optimizer and scheduler state, step, history, data
settings). It is written to a temporary file in the target directory, flushed to disk and then
renamed over the target, so a crash mid-write leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import os
import tempfile

import torch

from .attention import GlobalAttention, SchwarzAttention
from .flare import FLARE, FLAREPlusPlus

__all__ = ["save", "load", "read_payload", "build_model", "atomic_write", "atomic_write_json",
           "architecture", "FORMAT", "VERSION"]

FORMAT = "ddlearn-checkpoint"
VERSION = 1


def architecture(config: dict) -> dict:
    """The config without its initialisation-only entries: two models with equal architectures
    can exchange parameters."""
    return {k: v for k, v in config.items() if k not in ("seed", "init_scale")}


def build_model(config: dict) -> torch.nn.Module:
    """Construct a fresh model from its ``config`` dict."""

    kinds = {c.kind: c for c in (GlobalAttention, SchwarzAttention, FLARE, FLAREPlusPlus)}
    args = dict(config)
    kind = args.pop("kind", None)
    if kind not in kinds:
        raise ValueError(f"unknown model kind {kind!r}; known kinds are {sorted(kinds)}")
    return kinds[kind](**args)


def atomic_write(path: str, write) -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, then rename it onto ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str, data) -> None:
    """``data`` as indented JSON at ``path``, through :func:`atomic_write`."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=1).encode()))


def read_payload(path: str, fmt: str, version: int, what: str) -> dict:
    """The dict saved at ``path``, checked to carry ``format == fmt`` and ``version``.

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


def save(path: str, model: torch.nn.Module, *, problem: dict | None = None, **extra) -> None:
    """Write ``model`` (config + parameters) and ``extra`` entries to ``path`` atomically."""
    payload = {"format": FORMAT, "version": VERSION, "config": model.config,
               "state": model.state_dict(), "problem": problem, **extra}
    atomic_write(path, lambda f: torch.save(payload, f))


def _mismatch(what, saved, wanted, path):
    raise ValueError(f"checkpoint {path} was made for {what} {saved}, not {wanted}: train a model "
                     f"for this configuration or load a checkpoint made for it")


def load(path: str, *, problem: dict | None = None, expect: dict | None = None):
    """Rebuild the model stored at ``path``; returns ``(model, checkpoint_dict)``.

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
    ckpt = read_payload(path, FORMAT, VERSION, "ddlearn checkpoint")
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
