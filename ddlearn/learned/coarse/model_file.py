r"""The learned coarse space's model file and its record: the model (configuration, parameters,
training metadata) written atomically to ``path``, and beside it ``path + '.json'`` with its
SHA-256, size, configuration and the training settings and checks. A model is read only after
the file matched its record: one without its record, modified or truncated is never unpickled.

The models shipped with ddlearn lie in ``pretrained/`` (:data:`PRETRAINED`, the 2D one; the
command in a record, with ``--force``, remakes its model in place).
"""
from __future__ import annotations

import json
import os

from ...decomposition.atomic import atomic_write_json
from ...nn import checkpoint as nn_checkpoint
from ...nn.checkpoint import file_hash
from ...nn.subdomain_basis import KIND as ATTENTION_KIND, SubdomainBasisNet
from .network import KIND, LocalCoarseNet

__all__ = ["PRETRAINED", "MODEL_KINDS", "save_model", "update_record", "load_model"]

#: a model file's ``kind`` -> its network class and the module whose command trains it
MODEL_KINDS = {KIND: (LocalCoarseNet, "ddlearn.learned.coarse.local_training"),
               ATTENTION_KIND: (SubdomainBasisNet, "ddlearn.learned.coarse.attention_training")}

#: the model shipped with ddlearn (the command in its record ``PRETRAINED + '.json'``, with
#: ``--force``, remakes it in place)
PRETRAINED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained",
                          "local_coarse.pt")


def _fix(path: str, kind: str = KIND) -> str:
    """What to do when a model's record is missing or does not match the model file."""
    return (f"retrain with python -m {MODEL_KINDS[kind][1]} --out {path} "
            f"--force (the command a record carries reproduces its model) or restore {path} and "
            f"its record {path}.json together")


def save_model(path: str, model: LocalCoarseNet, meta: dict, **extra) -> None:
    """Write the model (config, parameters, the training record ``meta`` and ``extra``, e.g.
    the state a run resumes from) atomically to ``path`` in the one checkpoint format
    (:mod:`ddlearn.nn.checkpoint`) and its record (SHA-256, size in bytes, config, metadata) to
    ``path + '.json'``."""
    nn_checkpoint.save(path, model.config, model.state_dict(), record=meta, **extra)
    record = {"sha256": file_hash(path), "bytes": os.path.getsize(path), "config": model.config,
              **meta}
    atomic_write_json(path + ".json", record)


def _read_record(path: str, kind: str = KIND) -> dict:
    """The record ``path + '.json'`` of the model at ``path``.

    Raises
    ------
    ValueError
        When the record is missing or is not a JSON object with a ``sha256`` entry.
    """
    record_path = path + ".json"
    if not os.path.exists(record_path):
        raise ValueError(f"the learned coarse-space model {path} has no record {record_path} "
                         f"(its SHA-256 and training settings), so it cannot be verified: "
                         f"{_fix(path, kind)}")
    try:
        with open(record_path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"the record {record_path} of the learned coarse-space model {path} is "
                         f"not readable JSON ({e}): {_fix(path, kind)}") from e
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        raise ValueError(f"the record {record_path} of the learned coarse-space model {path} "
                         f"has no SHA-256: {_fix(path, kind)}")
    return record


def update_record(path: str, **entries) -> None:
    """Add ``entries`` to the model's record ``path + '.json'`` (atomically; the model file and
    its hash are unchanged)."""
    record = _read_record(path)
    record.update(entries)
    atomic_write_json(path + ".json", record)


def load_model(path: str, kind: str = KIND):
    """``(model, meta, extra)`` from ``path``, after checking the file against its record;
    ``kind``: the model kind expected (:data:`MODEL_KINDS`).

    The SHA-256 (and size) recorded in ``path + '.json'`` is checked before the file is read
    as a torch payload: a model without its record, or one that was modified or truncated,
    is never loaded.

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    ValueError
        When the record is missing or unreadable, the file does not match the recorded
        SHA-256 (modified or truncated), or it is not a learned coarse-space model of this
        format version (a retired format: naming the command that converts it); the message
        names the file and how to fix it.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no learned coarse-space model at {path}")
    record = _read_record(path, kind)
    size, recorded_size = os.path.getsize(path), record.get("bytes")
    if recorded_size is not None and size != recorded_size:
        raise ValueError(f"{path} does not match the SHA-256 recorded in {path}.json: it has "
                         f"{size} bytes, the record says {recorded_size} (the file was "
                         f"truncated or modified): {_fix(path, kind)}")
    if record["sha256"] != file_hash(path):
        raise ValueError(f"{path} does not match the SHA-256 recorded in {path}.json: the "
                         f"file was modified or truncated: {_fix(path, kind)}")
    payload = nn_checkpoint.read(path, "learned coarse-space model")
    config = dict(payload["config"])
    if config.pop("kind", None) != kind:
        raise ValueError(f"{path} is a checkpoint of a {payload['config'].get('kind')!r} model, "
                         f"not a {kind!r} model: give a model file of this coarse space "
                         f"(python -m {MODEL_KINDS[kind][1]} trains one)")
    model = MODEL_KINDS[kind][0](**config)
    model.load_state_dict(payload["state"])
    extra = nn_checkpoint.entries(payload)
    return model, extra.pop("record"), extra
