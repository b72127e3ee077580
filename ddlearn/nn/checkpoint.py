r"""The one checkpoint format of ddlearn's learned models (operator learning, the neural
operators, the learned coarse spaces): a model rebuilt from the file alone, and the state a
:class:`~ddlearn.nn.trainer.Trainer` run resumes from.

One ``torch.save`` file, read with ``torch.load(weights_only=True)`` (tensors and plain types
only, nothing is unpickled):

- ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`);
- ``config``: the model's construction settings with its ``kind`` (JSON-plain: dicts, lists,
  strings, numbers, booleans, ``None``; a callable such as an activation function is refused at
  save time, since the file could not be read back);
- ``state``: the parameters the model is used with (the best state of a run);
- ``meta``: what the model was made for and from (problem, data record, normalisation, ...);
- ``training``: where a run stands (current parameters, optimiser, schedule, random state, step,
  history, settings) or ``None``.

Written to a temporary file beside the target and renamed over it: an interrupted write leaves
the previous checkpoint. Files of the retired formats (:data:`RETIRED`) are refused with the
command that converts them once, ``python -m ddlearn.nn.checkpoint convert FILE``, which also
updates the SHA-256 of a record ``FILE.json`` beside the file.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch

from ..decomposition.atomic import atomic_write, atomic_write_json

__all__ = ["FORMAT", "VERSION", "RETIRED", "TRAINING", "save", "entries", "read", "load",
           "check_compatible", "file_hash", "convert", "main"]

FORMAT = "ddlearn-checkpoint"
VERSION = 2
#: the entries that describe where training stood (a checkpoint's ``training``)
TRAINING = ("current_state", "optimizer", "scheduler", "sampler", "rng", "step", "epoch",
             "history", "seconds", "train_s", "train_config", "train")
#: ``(format, version)`` of the formats this ddlearn converts (operator learning, neural
#: operators, learned local coarse space)
RETIRED = (("ddlearn-checkpoint", 1), ("ddlearn-nn-checkpoint", 1), ("learned-local-coarse", 1))

_PLAIN = (str, int, float, bool, type(None))


def _check_plain(value, where: str, tensors: bool) -> None:
    """Raise unless ``value`` is what ``torch.load(weights_only=True)`` reads back (plain types,
    and tensors where ``tensors``)."""
    if isinstance(value, _PLAIN) or (tensors and isinstance(value, torch.Tensor)):
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise ValueError(f"{where} has the key {k!r} of type {type(k).__name__}: keys "
                                 f"must be strings")
            _check_plain(v, f"{where}[{k!r}]", tensors)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]", tensors)
        return
    raise ValueError(f"{where} is {value!r} of type {type(value).__name__}, which a checkpoint "
                     f"cannot store (it is read with torch.load(weights_only=True)): store its "
                     f"name, e.g. 'gelu', and build it from the name")


def _payload(config: dict, state: dict, entries: dict) -> dict:
    """The payload of ``config``, ``state`` and ``entries`` split into ``meta`` and ``training``
    (the entries named in :data:`TRAINING`)."""
    training = {k: v for k, v in entries.items() if k in TRAINING}
    meta = {k: v for k, v in entries.items() if k not in TRAINING}
    return {"format": FORMAT, "version": VERSION, "config": config, "state": state,
            "meta": meta, "training": training or None}


def save(path: str, config: dict, state: dict, **entries) -> None:
    """Write one checkpoint atomically (module docstring): ``entries`` named in
    :data:`TRAINING` go to ``training``, the others to ``meta``.

    Raises
    ------
    ValueError
        When ``config`` is not JSON-plain or an entry holds something other than plain types
        and tensors, naming it; nothing is written then.
    """
    _check_plain(config, "the model config", tensors=False)
    _check_plain(entries, "the checkpoint's entries", tensors=True)
    payload = _payload(config, state, entries)
    atomic_write(path, lambda f: torch.save(payload, f))


def entries(payload: dict) -> dict:
    """The ``meta`` and ``training`` entries of a checkpoint as one dict (what was given to
    :func:`save`)."""
    return {**payload["meta"], **(payload["training"] or {})}


def _load(path: str, what: str) -> dict:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign file
        raise ValueError(f"{path} is not a readable {what} ({e})") from e
    if not isinstance(payload, dict):
        raise ValueError(f"{path} is not a {what}")
    return payload


def read(path: str, what: str = "ddlearn checkpoint") -> dict:
    """The checkpoint at ``path`` (tensors and plain types only).

    Raises
    ------
    ValueError
        For a truncated or foreign file, another version, or a retired format (naming the
        command that converts it; nothing is written).
    """
    payload = _load(path, what)
    key = (payload.get("format"), payload.get("version"))
    if key in RETIRED:
        raise ValueError(f"{path} is a {what} in the retired format {key[0]} version {key[1]}: "
                         f"convert it once with python -m ddlearn.nn.checkpoint convert {path} "
                         f"(nothing was written)")
    if key[0] != FORMAT:
        raise ValueError(f"{path} is not a {what}")
    if key[1] != VERSION:
        raise ValueError(f"{path} has {what} version {key[1]}; this ddlearn reads version "
                         f"{VERSION}")
    return payload


def load(path: str, expect: dict | None = None) -> dict:
    """Read the checkpoint at ``path`` as ``{"config", "state", "extra"}`` (``extra``: the
    entries it was saved with); with ``expect`` (a config), check it first
    (:func:`check_compatible`).

    Raises
    ------
    ValueError
        For a missing file, a file that is not a ddlearn checkpoint of this version (a retired
        one: naming the command that converts it), or another config.
    """
    if not os.path.isfile(path):
        raise ValueError(f"no checkpoint at {path}")
    payload = read(path)
    if expect is not None:
        check_compatible(path, payload["config"], expect)
    return {"config": payload["config"], "state": payload["state"], "extra": entries(payload)}


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


def file_hash(path: str) -> str:
    """SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _upgrade(payload: dict) -> dict:
    """A retired payload in the current layout (its entries split as :func:`save` splits)."""
    flat = {**payload.pop("extra", {}), **payload}
    if "meta" in flat:  # the learned coarse space's training record
        flat["record"] = flat.pop("meta")
    for k in ("format", "version"):
        flat.pop(k)
    config, state = flat.pop("config"), flat.pop("state")
    return _payload(config, state, flat)


def convert(path: str) -> bool:
    """Rewrite the checkpoint at ``path`` from a retired format in the current one (atomically;
    a record ``path + '.json'`` that held the old file's SHA-256 gets the new one). Returns
    whether the file was converted (``False``: already current).

    Raises
    ------
    ValueError
        For a file in neither a retired nor the current format.
    """
    payload = _load(path, "ddlearn checkpoint")
    key = (payload.get("format"), payload.get("version"))
    if key == (FORMAT, VERSION):
        return False
    if key not in RETIRED:
        raise ValueError(f"{path} is not a ddlearn checkpoint of a format this ddlearn converts "
                         f"({', '.join(f'{f} v{v}' for f, v in RETIRED)})")
    record_path, old = path + ".json", file_hash(path)
    upgraded = _upgrade(payload)
    atomic_write(path, lambda f: torch.save(upgraded, f))
    if os.path.exists(record_path):
        with open(record_path) as f:
            record = json.load(f)
        if record.get("sha256") == old:
            record["sha256"] = file_hash(path)
            if "bytes" in record:
                record["bytes"] = os.path.getsize(path)
            atomic_write_json(record_path, record)
    return True


def main(argv: list[str] | None = None) -> None:
    """``python -m ddlearn.nn.checkpoint convert FILE [FILE ...]``: convert checkpoints of the
    retired formats to the current one, in place."""
    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0], allow_abbrev=False)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("convert").add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    for path in args.files:
        print(f"{path}: {'converted' if convert(path) else 'already current'}")


if __name__ == "__main__":
    main()
