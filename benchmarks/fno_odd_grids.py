"""Whether ``neuraloperator``'s spectral layer is the same operator on grids of different size.

One ``SpectralConv`` of a random FNO (seed 0, 6 modes per axis, 12 channels) is fed
cos(2 pi x) on n1 and on n2 points per side of [0, 1]^2; its outputs are compared on the shared
points, ``|y2[::s, ::s] - y1| / |y1|`` with ``s = (n2 - 1) / (n1 - 1)``.

    python benchmarks/fno_odd_grids.py
    python benchmarks/fno_odd_grids.py --report

Between two odd sizes (21 -> 41) the difference is the discretisation's own. From an even to
an odd size (22 -> 43, the token-mixer study's training and transfer grids) it also shows
whether the layer undoes its ``fftshift`` with ``ifftshift``: ``fftshift`` twice is the
identity only on even sizes, so on an odd grid the kept modes would come back one frequency
off.
"""
import numpy as np

from ddlearn.harness import bench

#: (n1, n2): the token-mixer study's training -> transfer grid, and two odd grids
PAIRS = ((22, 43), (21, 41))


def difference(n1: int, n2: int) -> float:
    """Relative L2 difference of one random spectral layer's outputs on ``n1`` and ``n2``
    points per side, on the shared points."""
    import torch
    from neuralop.models import FNO

    torch.manual_seed(0)
    conv = FNO(n_modes=(6, 6), hidden_channels=12, in_channels=1, out_channels=1,
               n_layers=1).eval().fno_blocks.convs[0]

    def field(n):
        x = torch.linspace(0, 1, n, dtype=torch.float32)
        X, _ = torch.meshgrid(x, x, indexing="ij")
        return torch.cos(2 * np.pi * X)[None, None].repeat(1, 12, 1, 1)

    with torch.no_grad():
        a, b = conv(field(n1)), conv(field(n2))
    s = (n2 - 1) // (n1 - 1)
    return float((b[..., ::s, ::s] - a).norm() / a.norm())


def table(data: dict) -> str:
    return bench.markdown_table(
        ["n1", "n2", "relative difference"],
        [[r["n1"], r["n2"], f"{r['difference']:.2f}"] for r in data["rows"]])


def readme(args) -> str:
    files = bench.results(args)
    data = files["fno_odd_grids"]
    sections = [(f"One spectral layer on two grids (neuraloperator {data['neuraloperator']})",
                 table(data) + "\n\nAbove about 0.5 the layer is not one operator across the "
                 "two sizes: the token-mixer study marks FNO's transfer to odd grids by this.")]
    return bench.write_readme(args, "FNO's spectral layer on grids of odd size", sections, files)


def main(argv: list[str] | None = None) -> None:
    ap = bench.parser("fno_odd_grids", __doc__, "the same two pairs (the check is seconds)")
    args = bench.parse(ap, argv)
    if not args.report:
        import neuralop

        data = {"neuraloperator": neuralop.__version__,
                "rows": [{"n1": n1, "n2": n2, "difference": difference(n1, n2)}
                         for n1, n2 in PAIRS]}
        bench.show(table(data))
        bench.show(f"wrote {bench.write(args, data)}")
    bench.show(f"wrote {readme(args)}")


if __name__ == "__main__":
    main()
