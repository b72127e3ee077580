"""The run loop every study shares: a results file of rows, one row per (case, method), written
after every row and resumable.

A study ``benchmarks/<study>.py`` parses its command line with :func:`.bench.parser` /
:func:`.bench.parse` (``--out``, ``--quick``, ``--report``, ``--resume`` and its own options),
runs its cases x methods through :class:`Rows` (each row written atomically with the run's
provenance as it is measured, so an interrupted study keeps what it measured,
``--resume`` runs only the rest and ``--resume --redo`` the selected rows again), solves with
the one solve loop (:mod:`.systems`) and with ``--report`` prints its tables from the JSON
into ``README.md`` (:func:`.bench.write_readme` with the "Measured by" provenance list,
:func:`.bench.markdown_table`) and draws its plots (:func:`.report.save_figure`). A new study is its cases, its methods (names of
:data:`.methods.METHODS`, a PETSc reference by its entry's ``options``) and its tables.
"""
from __future__ import annotations

import argparse
import os
from typing import Callable

from . import bench

__all__ = ["Rows"]


class Rows:
    """The rows of one results file ``<args.out>/<name>.json`` (``data["rows"]``).

    With ``args.resume`` and an existing file, its rows that did not fail are kept and its
    provenance goes to ``data["earlier_runs"]`` (:func:`.bench.earlier_runs`); :meth:`done`
    then says which (case, method) keys need no run. :meth:`add` appends a row and rewrites the
    file (atomically, stamped: an interrupted write leaves the previous file).

    Parameters
    ----------
    args
        the parsed command line (``out``, ``resume``; :func:`.bench.parse`)
    data
        the file's settings; its ``rows`` are set here
    key
        a row's identity, ``row -> hashable`` (e.g. its case and method)
    name
        the file's stem (default: the study)
    """

    def __init__(self, args: argparse.Namespace, data: dict, key: Callable[[dict], object],
                 name: str | None = None):
        self.args, self.data, self.key, self.name = args, data, key, name
        data["rows"] = []
        path = os.path.join(args.out, f"{name or args.study}.json")
        if getattr(args, "resume", False) and os.path.exists(path):
            old = bench.read(path)
            data["rows"] = [r for r in old["rows"] if not r.get("error")]
            data["earlier_runs"] = bench.earlier_runs(old)
        self._done = {key(r) for r in data["rows"]}

    def done(self, key) -> bool:
        """Whether a kept row has this key (a resumed run skips it; with ``args.redo`` none
        is done)."""
        return key in self._done and not getattr(self.args, "redo", False)

    def add(self, row: dict) -> dict:
        """Append ``row`` in place of a kept row of the same key, write the file (collective)
        and return the row."""
        key = self.key(row)
        self.data["rows"] = [r for r in self.data["rows"] if self.key(r) != key] + [row]
        self._done.add(key)
        bench.write(self.args, self.data, self.name)
        return row
