"""The training-speed protocol (budget ladder, learning-rate sweep) and the data-aware
initialisation of the learned operators."""
import numpy as np
import pytest
import torch

from ddlearn.decomposition.problems import Poisson1D
from ddlearn.nn.operators import FLARE, FLAREPlusPlus, GlobalAttention, SchwarzAttention
from ddlearn.learned.operators.data import Dataset, make_splits
from ddlearn.learned.operators.data_init import data_init, range_finder, reduced_rank_fit
from ddlearn.learned.operators.protocol import budget_ladder, budget_run, lr_sweep
from ddlearn.learned.operators.training import evaluate

N = 63


@pytest.fixture(scope="module")
def splits():
    return make_splits(Poisson1D(N), 128, 32, 32, modes=16, seed=0)


def schwarz(seed):
    return SchwarzAttention((N,), 4, 2, 2, "hats", seed=seed)


def test_budget_ladder_finds_the_smallest_budgets_deterministically(splits):
    """Both thresholds are reached (test errors of the rungs 0/10/20/40 from a random start:
    about 2.3 / 0.54 / 0.25 / 0.10), each at the first rung at or below it; the ladder then
    stops, so the 80-step rung is not run. Twice: the same budgets and errors (seconds are not
    compared)."""
    kw = dict(budgets=[0, 10, 20, 40, 80], thresholds=(0.3, 0.12), lr=1e-2, init=False,
              batch_size=16, evaluations=5)
    a, b = (budget_ladder(schwarz, splits, **kw) for _ in range(2))
    steps = lambda lad: {t: v and v["steps"] for t, v in lad["reached"].items()}  # noqa: E731
    assert steps(a) == {"0.3": 20, "0.12": 40}
    assert a["stopped"] == "all thresholds reached"
    assert [r["budget"] for r in a["runs"]] == [0, 10, 20, 40]
    errors = {r["budget"]: r["test_error"] for r in a["runs"]}
    for tau, hit in a["reached"].items():
        budget = hit["steps"]
        assert hit["test_error"] == errors[budget] <= float(tau)
        # smallest: every rung below it ended above the threshold
        assert all(e > float(tau) for s, e in errors.items() if s < budget)
    assert steps(b) == steps(a) and b["stopped"] == a["stopped"]
    assert [r["test_error"] for r in b["runs"]] == [r["test_error"] for r in a["runs"]]


def test_budget_ladder_stops_on_a_plateau(splits):
    """A learning rate so large that training diverges: no rung beats the initialisation."""
    lad = budget_ladder(schwarz, splits, [0, 10, 20, 40], (1e-6,), 1e3, patience=2,
                        init=False, batch_size=16, evaluations=2)
    assert [r["budget"] for r in lad["runs"]] == [0, 10, 20]
    assert lad["stopped"].startswith("plateau") and lad["reached"]["1e-06"] is None


def test_budget_zero_is_the_initialisation_alone(splits):
    r = budget_run(schwarz, splits, 0, 1e-3)
    model = data_init(schwarz(0), splits.train)
    assert r["steps_per_s"] is None and r["seconds"] == r["init_s"]
    assert r["test_error"] == pytest.approx(evaluate(model, splits.test), rel=1e-12)


@pytest.mark.parametrize("factory", [
    lambda: GlobalAttention(N, 8), lambda: schwarz(0), lambda: FLARE((N,), 2, 8, 4),
    lambda: FLAREPlusPlus((N,), 2, 8, 4)], ids=["global", "schwarz", "flare", "flare++"])
def test_data_init_lowers_the_initial_validation_error(splits, factory):
    model = factory()
    random = evaluate(model, splits.val)
    data_init(model, splits.train)
    assert evaluate(model, splits.val) < random


def test_data_init_of_the_global_model_is_the_reduced_rank_fit(splits):
    """With rank = number of modes the targets are an exact rank-16 map of the inputs."""
    model = data_init(GlobalAttention(N, 16), splits.train)
    assert evaluate(model, splits.val) < 1e-10


def test_schwarz_sweeps_do_not_increase_the_least_squares_error(splits):
    w = 1 / splits.train.U.norm(dim=1, keepdim=True)
    scaled = Dataset(splits.train.F * w, splits.train.U * w)
    errs = []
    for sweeps in (1, 2, 4):
        model = data_init(schwarz(0), splits.train, sweeps=sweeps)
        with torch.no_grad():
            errs.append(float(((model(scaled.F) - scaled.U) ** 2).sum()))
    assert errs[0] >= errs[1] * (1 - 1e-10) and errs[1] >= errs[2] * (1 - 1e-10)


def test_reduced_rank_fit_recovers_a_low_rank_map():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 20))
    W = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 20))
    K, Q = reduced_rank_fit(X, X @ W, 3)
    np.testing.assert_allclose(X @ K @ Q.T, X @ W, atol=1e-9)
    V = range_finder(X, 4)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)


def test_lr_sweep_keeps_the_lowest_validation_error(splits):
    lr, runs = lr_sweep(schwarz, splits, [1e-3, 1e-2], 10, init=False, batch_size=16, evaluations=2)
    assert lr == min(runs, key=lambda r: r["val_error"])["lr"]
    assert [r["lr"] for r in runs] == [1e-3, 1e-2]


def test_bad_input_is_refused(splits):
    with pytest.raises(ValueError, match="symmetric"):
        data_init(GlobalAttention(N, 4, symmetric=True), splits.train)
    with pytest.raises(TypeError, match="Linear"):
        data_init(torch.nn.Linear(N, N), splits.train)
    with pytest.raises(ValueError, match="increasing"):
        budget_ladder(schwarz, splits, [10, 0], (0.1,), 1e-3)
    with pytest.raises(ValueError, match="patience"):
        budget_ladder(schwarz, splits, [0], (0.1,), 1e-3, patience=0)
    with pytest.raises(ValueError, match="non-negative"):
        budget_run(schwarz, splits, -1, 1e-3)
    with pytest.raises(ValueError, match="learning rate"):
        lr_sweep(schwarz, splits, [], 10)
    with pytest.raises(ValueError, match="rank"):
        range_finder(np.ones((3, 4)), 5)
