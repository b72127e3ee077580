"""Whether ``neuraloperator``'s spectral layer is the same operator on grids of different size:
one ``SpectralConv`` of a random FNO (seed 0, 6 modes, 12 channels) fed cos(2 pi x) on n1 and
n2 points of [0, 1] per side, the outputs compared on the shared points (relative L2).

    python benchmarks/fno_odd_grids.py

An even n1 against an odd n2 shows the layer's inverse ``fftshift`` (the identity only on even
sizes); two odd sizes show the discretisation's own difference.
"""
import numpy as np
import torch
from neuralop.models import FNO


def difference(n1: int, n2: int) -> float:
    torch.manual_seed(0)
    conv = FNO(n_modes=(6, 6), hidden_channels=12, in_channels=1, out_channels=1,
               n_layers=1).eval().fno_blocks.convs[0]

    def field(n):
        x = torch.linspace(0, 1, n)
        X, _ = torch.meshgrid(x, x, indexing="ij")
        return torch.cos(2 * np.pi * X)[None, None].repeat(1, 12, 1, 1)

    with torch.no_grad():
        a, b = conv(field(n1)), conv(field(n2))
    s = (n2 - 1) // (n1 - 1)
    return float((b[..., ::s, ::s] - a).norm() / a.norm())


if __name__ == "__main__":
    import neuralop
    print(f"neuraloperator {neuralop.__version__}")
    for n1, n2 in ((22, 43), (21, 41)):
        print(f"{n1} -> {n2} points: relative difference {difference(n1, n2):.2f}")
