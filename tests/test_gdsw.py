"""GDSW coarse functions: an indicator partition of the interface, discrete-harmonic inside the
parts, the constants reproduced in parts away from the Dirichlet boundary."""
import numpy as np

from ddlearn.classical.gdsw import gdsw_basis, interface_components
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.problems import make_problem


def test_gdsw_functions_are_harmonic_extensions_of_interface_indicators():
    p = make_problem("channels", 31, contrast=1e4)
    A = p.matrix()
    dec = Decomposition(p.grid, 16, 0)
    part = np.empty(p.n, dtype=np.int64)
    for i, o in enumerate(dec.owned):
        part[o] = i
    Phi = gdsw_basis(A, part)
    gamma, component = interface_components(A, part)
    on_gamma = Phi[gamma].toarray()
    np.testing.assert_array_equal(on_gamma, np.eye(Phi.shape[1])[component])
    interior = np.setdiff1d(np.arange(p.n), gamma)
    assert np.abs((A @ Phi)[interior]).max() <= 1e-9 * abs(A).max()
    # the 4 central parts of the 4 x 4 box grid touch no Dirichlet boundary
    central = np.isin(part, [5, 6, 9, 10])
    np.testing.assert_allclose(np.asarray(Phi.sum(axis=1)).ravel()[central], 1.0, rtol=1e-10)
