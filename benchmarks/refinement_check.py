r"""What the learned coarse space's a-posteriori check sees: the loss it stands in for, the
residuals it could have used, and the last Krylov step's change it uses.

    python benchmarks/refinement_check.py [--quick] [--json FILE]
    python benchmarks/refinement_check.py --report FILE

Per unseen field (``random_<family>``, contrast 1e6, the first test seed; 255², N = 64 boxes,
overlap 1, the multiplicity partition of unity, the Dirichlet pencil
:math:`A_i^Nv = \lambda D_iA_iD_iv`) and per start (the shipped network's vectors, or seeded
random ones) the refinement with ``s`` block Krylov steps gives per subdomain

- the loss :func:`~ddlearn.learned.coarse.local_coarse.ritz_loss` against the exact eigenvalues
  (scipy, tol 1e-10): :math:`\sum_{j\le k}(\tilde\lambda_j-\lambda_j)/\lambda_{k+1}`, what CG
  pays for (a missed low mode costs a whole unit);
- the largest scaled residual :math:`\max_j\|A^Nv_j-\tilde\lambda_jBv_j\|_W /
  (\|A^Nv_j\|_W+\tilde\lambda_j\|Bv_j\|_W)`, :math:`\|x\|_W^2=\sum_rx_r^2/a^N_{rr}`, in [0, 1];
- the last step's change :math:`\Delta` of
  :func:`~ddlearn.learned.coarse.local_coarse.refine_checked` (computable at set-up, no exact
  eigenvalue needed).

Reported: median / 90th percentile / maximum over the subdomains, and each estimate's rank
correlation with the loss. Serial; numbers only (no timing).
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch

from ddlearn.classical.coarse.spectral import SpectralSettings, local_eigenvectors
from ddlearn.classical.reference import neumann_matrix
from ddlearn.decomposition import Decomposition
from ddlearn.learned.coarse.local_coarse import (PRETRAINED, PatchBatch, load_model,
                                                 refine_checked, start_vectors)
from ddlearn.learned.coarse.local_training import SEEDS, family_problem
from ddlearn.learned.common import atomic_write_json

FAMILIES = ("channels", "inclusions", "lognormal")


def scaled_residual(AN, B, lam, V) -> float:
    w = 1.0 / np.sqrt(AN.diagonal())[:, None]
    AV, BV = w * (AN @ V), w * (B @ V)
    num = np.linalg.norm(AV - BV * lam, axis=0)
    den = np.linalg.norm(AV, axis=0) + lam * np.linalg.norm(BV, axis=0)
    return float(np.max(num / den))


def _rank_correlation(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _stats(x) -> list[float]:
    return [float(v) for v in np.percentile(x, [50, 90, 100])]


def run(n: int, N: int, families, steps, k: int = 8) -> list[dict]:
    model = load_model(PRETRAINED)[0]
    dec = Decomposition((n, n), N, 1)
    rows = []
    for family in families:
        A = family_problem(family, n, 2, contrast=1e6, seed=SEEDS["test"]).matrix()
        ANs = [neumann_matrix(A, I) for I in dec.subdomains]
        rights = [A[I][:, I].tocsr() for I in dec.subdomains]
        Ds = [dec.D(i) for i in range(N)]
        batch = PatchBatch(ANs, Ds, rights=rights)
        exact = [local_eigenvectors(a, d, SpectralSettings(k + 1, eigensolver="scipy"),
                                    right=r)[0] for a, d, r in zip(ANs, Ds, rights)]
        for start in ("network", "random"):
            X = start_vectors(model, batch, start)
            for s in steps:
                pairs, change = refine_checked(batch, X, s, k)
                loss = [float(np.sum((lam - ex[:k]) / ex[k])) for (lam, _), ex in
                        zip(pairs, exact)]
                residual = [scaled_residual(*batch.block(i), lam, V)
                            for i, (lam, V) in enumerate(pairs)]
                rows.append({"family": family, "start": start, "steps": s,
                             "loss": _stats(loss), "residual": _stats(residual),
                             "change": _stats(change),
                             "residual_vs_loss": _rank_correlation(residual, loss),
                             "change_vs_loss": _rank_correlation(change, loss)})
                print(f"{family} {start} s={s}: loss {rows[-1]['loss']}", flush=True)
    return rows


def report(data: dict) -> str:
    f = lambda v: " / ".join(f"{x:.3g}" for x in v)  # noqa: E731
    lines = [f"{data['n']}², N = {data['N']}, k = {data['k']}, Dirichlet pencil; median / 90 % / "
             f"max over subdomains; rank correlation with the loss", "",
             "| family | start | steps | loss | scaled residual | last-step change | corr "
             "residual | corr change |", "|---|---|---:|---|---|---|---:|---:|"]
    for r in data["rows"]:
        lines.append(f"| {r['family']} | {r['start']} | {r['steps']} | {f(r['loss'])} | "
                     f"{f(r['residual'])} | {f(r['change'])} | {r['residual_vs_loss']:.2f} | "
                     f"{r['change_vs_loss']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="127², N = 16, channels, steps 2 3")
    ap.add_argument("--json", default="benchmarks/results/refinement_check.json")
    ap.add_argument("--report", metavar="FILE")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as fh:
            data = json.load(fh)
        print(report(data))
        return data
    torch.set_num_threads(1)
    n, N, families, steps = ((127, 16, ("channels",), (2, 3)) if args.quick else
                             (255, 64, FAMILIES, (2, 3, 4)))
    data = {"n": n, "N": N, "k": 8, "model": os.path.basename(PRETRAINED),
            "rows": run(n, N, families, steps)}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    atomic_write_json(args.json, data)
    print(report(data))
    print(f"wrote {args.json}")
    return data


if __name__ == "__main__":
    main()
