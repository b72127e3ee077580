"""The learned local coarse space (ddlearn.learned.coarse.learned): its refinement, its loss, its
training (resumable, deterministic), the shipped model, SPD for any weights and field, parity
between the distributed PC and a serial construction on 1-4 ranks, and bad input refused on
every rank."""
import json
import os
import shlex
import shutil
from dataclasses import asdict

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from mpi4py import MPI

from conftest import (apply_gathered, client_matrix, gathered_csr, gathered_sets,
                      pc_from_options, raised_everywhere, solve_with_pc_options)
from ddlearn.classical import reference
from ddlearn.classical.reference import neumann_matrix
from ddlearn.classical.coarse.spectral import SpectralSettings, local_eigenvectors
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.problems import Diffusion2D, make_problem
from ddlearn.learned.coarse.model_file import PRETRAINED, load_model, save_model
from ddlearn.learned.coarse.network import LocalCoarseNet
from ddlearn.learned.coarse.patches import PatchBatch
from ddlearn.learned.coarse.refinement import refine, ritz_loss
from ddlearn.learned.coarse.serving import serial_basis
from ddlearn.learned.coarse.starts import start_vectors
from ddlearn.learned.coarse.learned import PRETRAINED_BY_DIM, Learned
from ddlearn.learned.coarse.local_training import (LocalTrainConfig, check_iterations, main,
                                            step_fields, train_local_coarse)
from ddlearn.pc import two_level

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"


def _patches(n=31, N=4, family="channels", contrast=1e6, seed=3):
    A = make_problem(f"random_{family}", n, contrast=contrast, seed=seed).matrix()
    dec = Decomposition((n, n), N, 1)
    ANs = [reference.neumann_matrix(A, I) for I in dec.subdomains]
    return ANs, [dec.D(i) for i in range(N)]


def _model_file(tmp_path_factory, name="random.pt", seed=5, sizes=(50, 200), **train_config):
    """A model with random weights and the metadata the PC checks, written on rank 0."""
    path = COMM.bcast(str(tmp_path_factory.mktemp("lc") / name) if COMM.rank == 0 else None)
    if COMM.rank == 0:
        cfg = {**LocalTrainConfig().__dict__, "families": ["channels"], **train_config}
        save_model(path, LocalCoarseNet(vectors=4, hidden=8, layers=2, seed=seed),
                   {"train_config": cfg, "input_statistics": {"size_min": sizes[0], "size_max": sizes[1],
                                                              "log10_contrast_max": 8.0}})
    COMM.Barrier()
    return path


def test_exact_start_gives_zero_loss_and_the_eigenpairs():
    ANs, Ds = _patches()
    exact = [local_eigenvectors(a, d, SpectralSettings(5, eigensolver="scipy")) for a, d in
             zip(ANs, Ds)]
    batch = PatchBatch(ANs, Ds)
    X = torch.from_numpy(np.concatenate([V[:, :4] for _, V in exact]))
    loss = ritz_loss(batch, X, [lam for lam, _ in exact], steps=0, k=4)
    assert abs(float(loss)) < 1e-8
    for (lam, _), (ritz, _) in zip(exact, refine(batch, X.numpy(), steps=1, k=4)):
        assert np.allclose(ritz, lam[:4], rtol=1e-8, atol=1e-12)
    # a random start is worse, and the refinement steps bring it closer
    X = torch.from_numpy(np.random.default_rng(0).standard_normal(X.shape))
    losses = [float(ritz_loss(batch, X, [lam for lam, _ in exact], s, 4)) for s in (0, 1, 2)]
    assert losses[0] > losses[1] > losses[2] > 0


def test_features_do_not_depend_on_the_batch():
    ANs, Ds = _patches()
    alone = PatchBatch(ANs[1:2], Ds[1:2])
    together = PatchBatch(ANs, Ds)
    assert np.array_equal(alone.features, together.split(together.features)[1])


def test_training_resumes_exactly(tmp_path):
    cfg = LocalTrainConfig(families=("channels",), fields_per_family=2, validation_per_family=1,
                           fields_per_step=2, n=31, N=4, k=3, vectors=3, hidden=6, layers=1,
                           iterations=6, eval_every=2, lr=1e-2)
    straight = train_local_coarse(cfg, str(tmp_path / "a.pt"), COMM.Clone(), progress=False)
    # a run interrupted after 4 steps, then resumed from its checkpoint
    part = train_local_coarse(cfg, str(tmp_path / "c.pt"), COMM.Clone(), progress=False, until=4)
    assert part["step"] == 4 and not os.path.exists(tmp_path / "c.pt")
    resumed = train_local_coarse(cfg, str(tmp_path / "c.pt"), COMM.Clone(), progress=False)

    def curve(h):
        return [(e["step"], e["train_loss"], e["validation"]) for e in h["history"]]

    assert curve(resumed) == curve(straight)
    # a checkpoint of another configuration is not resumed
    other = LocalTrainConfig(**{**cfg.__dict__, "lr": 3e-3})
    train_local_coarse(other, str(tmp_path / "c.pt"), COMM.Clone(), progress=False, until=2)
    fresh = train_local_coarse(cfg, str(tmp_path / "c.pt"), COMM.Clone(), progress=False)
    assert curve(fresh) == curve(straight)
    a, _, _ = load_model(str(tmp_path / "a.pt"))
    c, _, _ = load_model(str(tmp_path / "c.pt"))
    for p, q in zip(a.parameters(), c.parameters()):
        assert torch.equal(p, q)


def test_step_batches_depend_on_seed_and_step_only():
    """Every step draws one field per residue class mod fields_per_step, from (seed, step)."""
    cfg = LocalTrainConfig(fields_per_family=5, fields_per_step=4)  # 15 fields
    batches = [step_fields(cfg, t) for t in range(200)]
    assert batches == [step_fields(cfg, t) for t in range(200)]
    assert all([f % 4 for f in b] == [0, 1, 2, 3] and max(b) < 15 for b in batches)
    assert set(sum(batches, [])) == set(range(15))
    assert step_fields(LocalTrainConfig(**{**cfg.__dict__, "seed": 1}), 0) != batches[0]
    with pytest.raises(ValueError, match="fields_per_step"):
        train_local_coarse(LocalTrainConfig(**{**cfg.__dict__, "fields_per_step": 16}), "x.pt")


def _shipped_copy(tmp_path, record=True):
    path = str(tmp_path / "model.pt")
    shutil.copy(PRETRAINED, path)
    if record:
        shutil.copy(PRETRAINED + ".json", path + ".json")
    return path


def test_damaged_or_unrecorded_model_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """The SHA-256 of the record is checked before the file is unpickled: a truncated or
    modified copy of the shipped model, or one without its record, is refused with a message
    that names the file and the fix."""
    good = _shipped_copy(tmp_path)
    model, meta, _ = load_model(good)
    assert meta["train_config"]["k"] == 8 and isinstance(model, LocalCoarseNet)
    reads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda f, *a, **kw: (reads.append(f),
                                                             real_load(f, *a, **kw))[1])
    (tmp_path / "truncated").mkdir()
    truncated = _shipped_copy(tmp_path / "truncated")
    with open(truncated, "r+b") as f:
        f.truncate(os.path.getsize(truncated) // 2)
    with pytest.raises(ValueError, match="SHA-256") as e:
        load_model(truncated)
    assert truncated in str(e.value) and "local_training --out" in str(e.value)
    (tmp_path / "modified").mkdir()
    modified = _shipped_copy(tmp_path / "modified")
    with open(modified, "r+b") as f:  # same size, one byte changed
        f.seek(os.path.getsize(modified) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match="SHA-256"):
        load_model(modified)
    (tmp_path / "bare").mkdir()
    bare = _shipped_copy(tmp_path / "bare", record=False)
    with pytest.raises(ValueError, match="no record") as e:
        load_model(bare)
    assert bare + ".json" in str(e.value) and "local_training" in str(e.value)
    assert "restore" in str(e.value)
    assert reads == []  # none of the refused files was unpickled
    load_model(good)
    assert reads == [good]


def test_command_line_refuses_to_overwrite_without_force(tmp_path, monkeypatch, capsys):
    """An existing --out (by default ./local_coarse.pt), the shipped model included, is
    refused before anything is computed or written; --force overwrites, and the recorded
    command reproduces the run without the run-control options."""
    tiny = ["--families", "channels", "--fields-per-family", "4", "--validation-per-family",
            "1", "--n", "31", "--N", "4", "--k", "3", "--vectors", "3", "--hidden", "6",
            "--layers", "1", "--iterations", "2", "--eval-every", "1", "--no-progress"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local_coarse.pt").write_bytes(b"someone's model")
    out = tmp_path / "mine.pt"
    out.write_bytes(b"my model")
    before = _shipped_state()
    for argv in (tiny, ["--out", str(out), *tiny], ["--out", PRETRAINED, *tiny]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "exists" in capsys.readouterr().err
        assert sorted(os.listdir(tmp_path)) == ["local_coarse.pt", "mine.pt"]
    assert (tmp_path / "local_coarse.pt").read_bytes() == b"someone's model"
    assert out.read_bytes() == b"my model" and _shipped_state() == before
    record = main(["--out", str(out), "--force", *tiny])
    assert record["train_config"]["fields_per_step"] == 4 and record["ranks"] == 1
    with open(str(out) + ".json") as f:
        saved = json.load(f)
    assert saved["command"] == ("mpiexec -n 1 python -m ddlearn.learned.coarse.local_training --out "
                                + str(out) + " " + " ".join(tiny[:-1]))
    assert len(saved["check"]) == 3
    load_model(str(out))


def _shipped_state():
    """When the shipped model and its record were last written."""
    return [os.stat(p).st_mtime_ns for p in (PRETRAINED, PRETRAINED + ".json")]


def test_spd_for_random_weights_and_fields(tmp_path_factory):
    path = _model_file(tmp_path_factory, seed=11)
    for family, seed in (("channels", 1), ("inclusions", 2), ("lognormal", 3)):
        prob = make_problem(f"random_{family}", 31, contrast=1e6, seed=seed)
        A = prob.matrix()
        T = two_level(A, Learned(path, nev=4), subdomains=4)
        Minv = T.aspreconditioner() @ np.eye(A.shape[0])
        assert np.abs(Minv - Minv.T).max() <= 1e-10 * np.abs(Minv).max()
        assert np.linalg.eigvalsh((Minv + Minv.T) / 2).min() > 0
        T.destroy()


@pytest.mark.parametrize("dim", [2, 3])
def test_shipped_model_reproduces_its_recorded_iterations(dim):
    """Each shipped model file (2D, 3D) matches its hash (load_model verifies it) and gives,
    with today's code, the CG iterations recorded when it was trained on the same fields, up
    to the one iteration round-off can move."""
    path = PRETRAINED_BY_DIM[dim]
    with open(path + ".json") as f:
        record = json.load(f)
    _, meta, _ = load_model(path)
    assert meta["train_config"].get("dim", 2) == dim
    assert len(record["check"]) == 3
    checked = check_iterations(path)
    assert [{**c, "iterations": None} for c in checked] == \
        [{**c, "iterations": None} for c in record["check"]]
    for now, then in zip(checked, record["check"]):
        # the same coarse space up to round-off (another processor's BLAS sums in another
        # order): CG converges alike, the last iteration on either side of the tolerance
        assert abs(now["iterations"] - then["iterations"]) <= 1, (now, then)


@pytest.mark.parametrize("dim", [2, 3])
def test_shipped_model_records_the_command_that_reproduces_it(monkeypatch, dim):
    """The recorded command runs the training script on the recorded number of ranks, and
    its options, read by the script's own parser, give exactly the recorded training settings
    and the shipped file as output (training itself is stubbed out)."""
    from ddlearn.learned.coarse import local_training
    path = PRETRAINED_BY_DIM[dim]
    with open(path + ".json") as f:
        record = json.load(f)
    words = shlex.split(record["command"])
    assert words[:2] == ["mpiexec", "-n"] and int(words[2]) == record["ranks"]
    assert words[3:6] == ["python", "-m", "ddlearn.learned.coarse.local_training"]
    seen = {}

    def fake_train(cfg, out, **kw):
        seen.update(cfg=cfg, out=out)
        return {"best_validation": 0.0, "best_step": 0, "data_s": 0.0, "train_s": 0.0,
                "ranks": COMM.Get_size()}

    monkeypatch.setattr(local_training, "train_local_coarse", fake_train)
    monkeypatch.setattr(local_training, "update_record", lambda *a, **kw: None)
    monkeypatch.setattr(local_training, "check_iterations", lambda *a, **kw: [])
    local_training.main(words[6:] + ["--force"])  # the record never carries --force
    config = asdict(seen["cfg"])
    assert {**config, "families": list(config["families"])} == record["train_config"]
    assert os.path.abspath(seen["out"]) == os.path.abspath(path)


def test_outside_the_trained_families_still_converges():
    """A contrast beyond the training data (warned about) and a family never trained on (a
    checkerboard): SPD, so CG converges; the warning names the contrast."""
    checker = Diffusion2D(127, lambda x, y: np.where((np.floor(8 * x) + np.floor(8 * y)) % 2,
                                                     1e4, 1.0))
    for prob, warned in ((make_problem("random_channels", 127, contrast=1e11, seed=7), True),
                         (checker, False)):
        A = prob.matrix()
        T = two_level(A, "learned", subdomains=16, coordinates=prob.coordinates())
        warnings = T.context.meta["learned"]["warnings"]
        assert any("beyond the trained" in w for w in warnings) == warned, warnings
        b = np.ones(A.shape[0])
        x, info = spla.cg(A, b, M=T.aspreconditioner(), rtol=1e-8, maxiter=2000)
        assert info == 0 and np.linalg.norm(b - A @ x) <= 1e-7 * np.linalg.norm(b)
        T.destroy()


# -- distributed ----------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("hats", [False, True])
def test_distributed_equals_serial_construction(tmp_path_factory, hats):
    n, N, k = 31, 4, 4
    path = _model_file(tmp_path_factory, seed=2)
    A = client_matrix(n, 1e6)
    # the check's fallback off: the serial reference below is the plain refinement
    pc = pc_from_options(A, f"lc_par_{int(hats)}_", pc=PC, subdomains=N,
                         coarse_space="hats+learned" if hats else "learned",
                         learned_model=path, learned_nev=k, learned_steps=1, learned_tol=1e300)
    ctx = pc.getPythonContext()
    sets, weights = gathered_sets(ctx)
    As = gathered_csr(A)
    # serial: all subdomains in one batch on one process, natural numbering
    model, _, _ = load_model(path)
    Phi = serial_basis(As, sets, weights, model, k, 1, [As[I][:, I] for I in sets]).toarray()
    if hats:
        Phi = np.hstack([gathered_csr(ctx.Phi).toarray()[:, :ctx.meta['hats']['n0']], Phi])
    assert ctx.Phi.getSize() == Phi.shape
    dec = type("dec", (), {"subdomains": sets, "owned": sets})()
    ref = reference.two_level(As, dec, sp.csr_matrix(Phi))
    x = np.random.default_rng(4).standard_normal(n * n)
    y, y_ref = apply_gathered(pc, A, x), ref @ x
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    pc.destroy(), A.destroy()


@pytest.mark.mpi
def test_random_start_is_the_same_refinement_from_seeded_vectors(tmp_path_factory):
    """``-ddlearn_learned_start random``: the refinement from seeded Gaussian vectors, the same
    on any number of ranks (seeded per global subdomain id), SPD, and another basis than the
    network's."""
    path = _model_file(tmp_path_factory, seed=2)
    A = client_matrix(31, 1e6)
    b = A.createVecLeft()
    b.set(1.0)
    common = dict(pc=PC, subdomains=4, coarse_space="learned", learned_model=path,
                  learned_nev=4, learned_steps=1, learned_tol=1e300)
    res = {start: solve_with_pc_options(A, b, f"lc_start_{start}_", learned_start=start,
                                        **common) for start in ("network", "random")}
    assert all(r.converged and r.rnorm_true < 1e-6 for r in res.values()), res
    pcs = {start: pc_from_options(A, f"lc_startb_{start}_", learned_start=start, **common)
           for start in ("network", "random")}
    Phis = {k: gathered_csr(p.getPythonContext().Phi).toarray() for k, p in pcs.items()}
    assert Phis["network"].shape == Phis["random"].shape
    scale = np.abs(Phis["network"]).max()
    assert np.abs(Phis["network"] - Phis["random"]).max() > 1e-3 * scale
    # the serial construction from the same seeded vectors, all subdomains in one batch
    ctx = pcs["random"].getPythonContext()
    s = ctx.subdomains
    sets = sorted(sum(COMM.allgather([(int(i), I, D) for i, I, D in
                                      zip(s.ids, s.overlapping, s.weights)]), []),
                  key=lambda t: t[0])
    model, _, _ = load_model(path)
    As = gathered_csr(A)
    batch = PatchBatch([neumann_matrix(As, t[1]) for t in sets], [t[2] for t in sets],
                       [t[0] for t in sets], rights=[As[t[1]][:, t[1]] for t in sets])
    V = refine(batch, start_vectors(model, batch, "random"), 1, 4)
    col = 0
    for (_, I, D), (_, v) in zip(sets, V):
        # the same coarse vectors of each subdomain: the same column space (Ritz vectors of
        # close Ritz values may turn within it under round-off, and signs are free)
        Q1 = np.linalg.qr(Phis["random"][I, col:col + 4])[0]
        Q2 = np.linalg.qr(D[:, None] * v)[0]
        assert np.abs(Q1 @ Q1.T - Q2 @ Q2.T).max() < 1e-6
        col += 4
    for p in pcs.values():
        p.destroy()
    msgs = raised_everywhere(lambda: pc_from_options(A, "lc_start_bad_", learned_start="magic",
                                                     **common).destroy(), exc=Exception)
    # the PC's prefix names the option
    assert all(m and "unknown -lc_start_bad_ddlearn_learned_start 'magic'" in m
               for m in msgs), msgs
    b.destroy(), A.destroy()


@pytest.mark.mpi
def test_bad_input_is_refused_on_every_rank(tmp_path_factory):
    path = _model_file(tmp_path_factory, seed=1)
    A = client_matrix(31, 1e6)
    coarser = _model_file(tmp_path_factory, "coarser.pt", sizes=(2000, 2400))
    # every message names the options with the PC's prefix ({p})
    cases = [
        (dict(overlap=2), "trained with overlap 1, not 2: use -{p}overlap 1"),
        (dict(learned_model=coarser), "choose -{p}subdomains so that the local resolution"),
        (dict(learned_nev=40), "-{p}learned_nev 40 exceeds"),
    ]
    for j, (extra, expected) in enumerate(cases):
        opts = {"subdomains": 4, "coarse_space": "learned", "learned_model": path, **extra}
        msgs = raised_everywhere(lambda: pc_from_options(A, f"lc_bad{j}_", pc=PC,
                                                         **opts).destroy(), exc=Exception)
        expected = expected.format(p=f"lc_bad{j}_ddlearn_")
        assert all(m is not None and expected in m for m in msgs), (extra, msgs)
    # a modified model file
    bad = COMM.bcast(path + ".bad.pt" if COMM.rank == 0 else None)
    if COMM.rank == 0:
        shutil.copy(path, bad)
        shutil.copy(path + ".json", bad + ".json")
        with open(bad, "ab") as f:
            f.write(b"\0")
    COMM.Barrier()
    msgs = raised_everywhere(lambda: pc_from_options(A, "lc_hash_", pc=PC, subdomains=4,
                                                     coarse_space="learned", learned_model=bad).destroy(),
                             exc=Exception)
    assert all(m is not None and "SHA-256" in m for m in msgs), msgs
    A.destroy()
    # a NaN coefficient in the matrix
    A = client_matrix(31, 1e6)
    lo, _ = A.getOwnershipRange()
    if COMM.rank == COMM.size - 1:
        A.setValue(lo, lo, np.nan)
    A.assemble()
    msgs = raised_everywhere(lambda: pc_from_options(A, "lc_nan_", pc=PC, subdomains=4,
                                                     coarse_space="learned", learned_model=path).destroy(),
                             exc=Exception)
    assert all(m is not None and "non-finite" in m for m in msgs), msgs
    A.destroy()
