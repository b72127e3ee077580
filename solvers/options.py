"""PETSc options-database helpers shared by the solvers."""
from __future__ import annotations

from petsc4py import PETSc

__all__ = ["set_defaults"]


def set_defaults(prefix: str | None, defaults: dict) -> None:
    """Put ``defaults`` into the options database under ``prefix`` unless the user already set
    them, so that command-line options always win (``-{prefix}{key} value``)."""
    opts = PETSc.Options()
    prefix = prefix or ""
    for key, value in defaults.items():
        name = f"{prefix}{key}"
        if not opts.hasName(name):
            opts.setValue(name, value)
