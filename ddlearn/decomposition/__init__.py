"""Layer 0 — what the unknowns are and how they are split: model problems, overlapping
subdomains (structured boxes on ddlearn's grids, or partitions of any matrix graph), partition
of unity, coarse-space geometry (hats, Nicolaides), grid coordinates, the PETSc-free
decomposition record (:mod:`.record`) and the PETSc layout of a decomposition.

Imports nothing from the layers above (:mod:`ddlearn.classical`, :mod:`ddlearn.learned`,
:mod:`ddlearn.pc`).
"""
from .structured import Decomposition, assign_ranks, box_grid, grid_coordinates, split

__all__ = ["Decomposition", "assign_ranks", "box_grid", "grid_coordinates", "split"]
