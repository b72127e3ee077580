"""Grouping by label: the positions of every label in an array of labels, the one helper for
a partition's parts, an interface's components and a rank's groups."""
from __future__ import annotations

import numpy as np

__all__ = ["label_groups"]


def label_groups(labels, n: int | None = None) -> list[np.ndarray]:
    """The positions of each label in ``labels`` (increasing within a group), groups in label
    order, by one stable sort.

    Parameters
    ----------
    labels : array_like of int, shape (m,)
    n : int, optional
        With ``n``: one group for every label ``0..n-1``, empty where a label is absent
        (``labels`` in ``0..n-1``). Without: one group for every label present (any integers,
        e.g. global numbers, with no array of their range).
    """
    labels = np.asarray(labels, dtype=np.int64)
    order = np.argsort(labels, kind="stable")
    if n is not None:
        return np.split(order, np.cumsum(np.bincount(labels, minlength=n))[:-1])
    if not len(labels):
        return []
    return np.split(order, np.flatnonzero(np.diff(labels[order])) + 1)
