"""The learned coarse space's refinement as the library serves it, on what the retired studies
``benchmarks/refinement.py`` and ``benchmarks/refinement_check.py`` measured of it (their
results and tables: ``benchmarks/results/refinement/``, ``benchmarks/results/refinement_check/``):
on a field it never saw, the shipped network's vectors refined by the served steps give
two-level CG iterations close to the exact spectral space of the same (Dirichlet) pencil, and
far fewer than the network's vectors alone or the same refinement from random vectors."""
import numpy as np
import scipy.sparse.linalg as spla

from ddlearn.classical.coarse.spectral import Spectral
from ddlearn.decomposition.problems import make_problem
from ddlearn.learned.coarse.learned import Learned
from ddlearn.learned.coarse.local_training import SEEDS
from ddlearn.pc import two_level


def _iterations(A, space, N: int = 16) -> int:
    """CG iterations (rtol 1e-8, a seeded Gaussian right-hand side, zero start) of additive
    two-level Schwarz on ``N`` box subdomains with ``space``."""
    T = two_level(A, space, subdomains=N)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    count = []
    _, info = spla.cg(A, b, rtol=1e-8, maxiter=3000, M=T.aspreconditioner(),
                      callback=lambda xk: count.append(1))
    T.destroy()
    assert info == 0
    return len(count)


def test_refined_network_start_is_near_spectral_and_beats_its_alternatives():
    # 127², N = 16: about 32² unknowns per subdomain, the model's training resolution
    A = make_problem("random_channels", 127, contrast=1e6, seed=SEEDS["test"]).matrix()
    spectral = _iterations(A, Spectral(8))
    # the a-posteriori check off (tol 1e300): every start gets the same served steps
    its = {name: _iterations(A, Learned(nev=8, tol=1e300, **kw))
           for name, kw in (("refined", {}), ("network alone", {"steps": 0}),
                            ("random refined", {"start": "random"}))}
    assert its["refined"] <= spectral + 3, (its, spectral)
    assert its["refined"] < its["network alone"] and its["refined"] < its["random refined"], its
