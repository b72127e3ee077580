r"""Q1 hats on the box grid of a ``boxes`` partition: per interior vertex of the box grid the
tensor product of the 1D interface hats over the axes (1D, 2D or 3D;
:func:`~ddlearn.decomposition.coarse.hats_on_boxes`), :math:`n_0 = \prod_a (B_a - 1)`. A
geometric space: it needs coordinates and does not depend on the matrix values."""
from __future__ import annotations

from ...decomposition.coarse import hats_on_boxes
from ...decomposition.collective import collective_check
from ..coarse_space import CoarseInput, CoarseSpace, CoarseVectors

__all__ = ["Hats"]


class Hats(CoarseSpace):
    name = "hats"
    partitioner = "boxes"
    supports_blocks = False

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        s = inp.subdomains
        p = inp.prefix
        collective_check(inp.comm, s.boxes is not None,
                         f"the hats coarse space lives on a box grid: it needs coordinates and "
                         f"-{p}partition boxes (or use -{p}coarse_space nicolaides, which needs "
                         f"the graph alone)")
        rows = hats_on_boxes(*s.boxes)
        collective_check(inp.comm, rows.shape[1] > 0,
                         f"the hats coarse space is empty with N = {s.N} (it needs at least two "
                         f"boxes per direction): use more subdomains or -{p}coarse_space "
                         f"nicolaides")
        self.found = {"n0": int(rows.shape[1])}
        return CoarseVectors.from_rows(rows, inp.A.getOwnershipRange()[0])
