"""`jaxicl sweep --stage PAPER:STAGE --grid SETTING=[...]` (jaxicl.experiments.stage_sweep)."""

import json

import numpy as np
import pytest
import xarray as xr

from jaxicl import cli
from jaxicl.experiments import gatmiry2024 as G
from jaxicl.experiments import stage_sweep
from jaxicl.experiments.report import Check
from jaxicl.experiments.settings import SettingsError


def test_thm41_premise_over_sigma_and_n_is_read_point_by_point(tmp_path):
    """Zhang's balanced flow over σ × N: where σ²‖Γ‖√d < 2 (σ = 0.5) Thm 4.1's claims pass, at σ = 2 they are "not
    applicable"; the flow's final loss is Lemma 5.3's minimum at every N (which changes with N as the theory says)."""
    from jaxicl.experiments import zhang2023 as Z
    from jaxicl.theory import zhang

    ds = stage_sweep.sweep_stage(
        "zhang2023:balanced_flow", {"sigma": [0.5, 2.0], "N": [5, 20]}, overrides={"t1": 500.0}, out=tmp_path
    )
    claims = list(ds.check_claim.values)
    limit = claims.index("flow → W^KQ_* (4.1)")
    assert list(ds.verdict.sel(sigma=0.5).isel(check=limit).values) == ["pass", "pass"]
    assert list(ds.verdict.sel(sigma=2.0).isel(check=limit).values) == ["not applicable", "not applicable"]
    for N in (5, 20):
        lmin = float(zhang.min_population_loss(Z.example_covariance(Z.SIZES["quick"].d), N))
        np.testing.assert_allclose(ds.min_loss.sel(N=N).values, lmin, rtol=1e-12)
        np.testing.assert_allclose(ds.final_loss.sel(sigma=0.5, N=N).values, lmin, atol=1e-8)
    assert ds.min_loss.sel(N=20, sigma=0.5) < ds.min_loss.sel(N=5, sigma=0.5)  # more examples, lower minimum
    saved = xr.load_dataset(tmp_path / "sweep.nc", engine="h5netcdf")
    assert saved.final_loss.shape == ds.final_loss.shape
    assert "sigma = 2.0, N = 5" in stage_sweep.verdict_table(ds)


def test_a_stage_sweep_resumes_point_by_point_and_recomputes_changed_settings(tmp_path, monkeypatch):
    calls = []

    def fake(cfg):
        calls.append((cfg.d, cfg.eps))
        return [Check("ε small enough", "—", f"{cfg.eps}", "≤ 1e-3", cfg.eps <= 1e-3)], xr.Dataset(
            {"value": ("i", np.arange(cfg.d) * cfg.eps)}
        )

    fake.__doc__ = "A fake stage."
    monkeypatch.setitem(G.SWEEPABLE, "fake", fake)
    grid = {"d": [2, 3], "eps": [1e-4, 1e-2]}
    ds = stage_sweep.sweep_stage("gatmiry2024:fake", grid, out=tmp_path)
    assert len(calls) == 4
    assert ds.value.dims == ("i", "d", "eps") and ds.sizes["i"] == 3  # d = 2 padded with NaN
    assert np.isnan(ds.value.sel(d=2, eps=1e-2).values[2])
    assert [list(r) for r in ds.verdict.isel(check=0).values] == [["pass", "FAIL"], ["pass", "FAIL"]]
    again = stage_sweep.sweep_stage("gatmiry2024:fake", grid, out=tmp_path)
    assert len(calls) == 4 and again.identical(ds)  # every point read back
    (tmp_path / "points" / "point-00001.nc").write_bytes(b"garbage")
    stage_sweep.sweep_stage("gatmiry2024:fake", grid, out=tmp_path, overrides={"construct_kappas": [2.0, 4.0]})
    assert len(calls) == 8  # another setting for every point: all computed again
    assert "gatmiry2024:fake" in stage_sweep.stages()


@pytest.mark.parametrize(
    "grid, match",
    [
        ({"dd": [1, 2]}, "Did you mean 'd'"),
        ({"kappas": [2.0, 4.0]}, "list setting"),
        ({"d": []}, "non-empty list"),
        ({"d": 2}, "non-empty list"),  # a TypeError traceback when the grid was written into the dataset's attributes
        ({"d": [2, -1]}, "d"),
        ({}, "needs a grid"),
        ({"eps": [1e-6, 1e-6]}, r"1e-06 appear more than once"),  # computed, then unstacking failed on the duplicates
        ({"d": [2, 2.0]}, "appear more than once"),
        (
            {"d": list(range(2, 402)), "n": list(range(2, 402)), "seed": list(range(400))},
            r"64,000,000 points \(400 × 400 × 400\)",
        ),
    ],
)
def test_a_bad_grid_is_refused_before_any_work(grid, match, tmp_path):
    """Each axis is checked, and the number of points counted from the axes' lengths, before one point is built: a
    grid of 64 million points is refused at once (it built about 15,000 settings a second before its first check)."""
    with pytest.raises(SettingsError, match=match):
        stage_sweep.sweep_stage("gatmiry2024:thm6_thm7", grid, out=tmp_path)
    assert not (tmp_path / "points").exists() or not list((tmp_path / "points").iterdir())


def test_a_vmapped_stage_sweep_counts_its_grid_before_building_it(tmp_path):
    """`lsa:flow` sweeps its grid as one program: a grid past its limit is refused from the axes' lengths alone."""
    axes = {k: list(range(1, 402)) for k in ("kappa", "n_context")} | {"seed": list(range(400))}
    with pytest.raises(SettingsError, match="more than the 1,000,000 this stage sweep runs"):
        stage_sweep.sweep_stage("lsa:flow", axes, out=tmp_path)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--stage", "nopaper:x", "--grid", "d=[2]"], "unknown reproduction 'nopaper'"),
        (["--stage", "gatmiry2024:nothing", "--grid", "d=[2]"], "no sweepable stage 'nothing'"),
        (["--stage", "gatmiry2024:thm6_thm7", "--grid", "dd=[2]"], "Did you mean 'd'"),
        (["--stage", "gatmiry2024:thm6_thm7", "--grid", "d=[2,-1]"], "d must be >= 1"),
        (["--stage", "gatmiry2024:thm6_thm7", "--grid", "d=[2]", "--set", "n=-3"], "n must be >= 1"),
        (["--stage", "gatmiry2024:constructions", "--grid", "eps=[1e-3,1e-3]"], "appear more than once"),
        (["--stage", "lsa:flow", "--grid", "kappa=[1]", "--grid", "d=[2,0]"], "d must be >= 1"),
    ],
)
def test_a_refused_stage_sweep_leaves_no_out_behind(argv, says, tmp_path, capsys):
    """Bad input is refused (exit status 2, saying why) before ``--out`` is created or locked: a mistyped command
    leaves no empty output folder holding a lock file (it used to, for every error the stage sweep itself found)."""
    out = tmp_path / "out"
    assert cli.main(["sweep", *argv, "--out", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_a_sweep_file_whose_grid_is_refused_leaves_no_outputs_dir_behind(tmp_path, capsys):
    """`jaxicl sweep FILE.toml` checks the stage sweep it is (its grid's size among the rest) before it creates
    ``outputs.dir``."""
    out = tmp_path / "out"
    path = tmp_path / "c.toml"
    axes = ", ".join(str(k) for k in range(1, 1002))
    path.write_text(f"[grid]\nkappa = [{axes}]\nn_context = [{axes}]\n[outputs]\ndir = '{out}'\n")
    assert cli.main(["sweep", str(path)]) == 2
    assert "more than the 1,000,000 this stage sweep runs" in capsys.readouterr().err
    assert not out.exists()


def test_stage_sweep_command_line(tmp_path, capsys):
    assert cli.main(["sweep", "--list-stages"]) == 0
    assert "gatmiry2024:thm6_thm7" in capsys.readouterr().out
    assert cli.main(["sweep", "--stage", "gatmiry2024:nothing", "--grid", "d=[2]", "--out", str(tmp_path)]) == 2
    assert "no sweepable stage 'nothing'" in capsys.readouterr().err
    assert cli.main(["sweep", "--stage", "gatmiry2024", "--grid", "d=[2]", "--out", str(tmp_path)]) == 2
    assert "--stage takes gatmiry2024:STAGE; its stages: ['constructions'," in capsys.readouterr().err
    for named_with_the_paper in (["--grid", "gatmiry2024.d=[2]"], ["--grid", "d=[2]", "--set", "gatmiry2024.n=8"]):
        argv = ["sweep", "--stage", "gatmiry2024:thm6_thm7", *named_with_the_paper, "--out", str(tmp_path)]
        assert cli.main(argv) == 2
        assert "a paper's settings are named without the paper" in capsys.readouterr().err
    assert cli.main(["sweep", "--stage", "nopaper:x", "--grid", "d=[2]", "--out", str(tmp_path)]) == 2
    assert cli.main(["sweep"]) == 2
    assert (
        cli.main(
            [
                "sweep",
                "--stage",
                "gatmiry2024:thm6_thm7",
                "--grid",
                "d=[3,4]",
                "--set",
                "thm6_depths=[1,2,3]",
                "--out",
                str(tmp_path),
                "--no-cache",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Thm 6: A_t = B_t⁻¹ is a global minimiser" in out and "| 2 pass |" in out
    ds = xr.load_dataset(tmp_path / "sweep.nc", engine="h5netcdf")
    # the proved OOD bound εδ′²d·9^(L−1) scales with d, point by point
    np.testing.assert_allclose(ds.bound_proved.sel(d=4).values / ds.bound_proved.sel(d=3).values, 4 / 3, rtol=1e-12)


def test_the_lsa_toml_sweep_is_one_case_of_a_stage_sweep_in_one_program(tmp_path, monkeypatch, capsys):
    """`jaxicl sweep --stage lsa:flow --grid ...` and `jaxicl sweep FILE.toml` with the same settings give the same
    dataset; the grid over κ and N runs as one call of the stage (one vmapped program: `jaxicl.sweep`), not point by
    point, and its final losses are Lemma 5.3's minimum."""
    from jaxicl.experiments import lsa_sweep

    calls = []
    flow = lsa_sweep.flow
    monkeypatch.setitem(lsa_sweep.SWEEPABLE, "flow", lambda *a, **k: calls.append(k["grid"]) or flow(*a, **k))
    lsa_sweep.SWEEPABLE["flow"].grid_axes = flow.grid_axes
    args = ["--grid", "kappa=[1, 4]", "--grid", "n_context=[5, 10]", "--set", "d=3", "--set", "t1=200.0"]
    assert cli.main(["sweep", "--stage", "lsa:flow", *args, "--out", str(tmp_path / "stage")]) == 0
    assert calls == [{"kappa": [1.0, 4.0], "n_context": [5, 10]}]
    toml = tmp_path / "lsa.toml"
    toml.write_text(
        f"[task]\nd = 3\n[dynamics]\nt1 = 200.0\n[grid]\nkappa = [1.0, 4.0]\nn_context = [5, 10]\n"
        f'[outputs]\ndir = "{tmp_path / "file"}"\n'
    )
    assert cli.main(["sweep", str(toml)]) == 0
    assert len(calls) == 2 and "wrote" in capsys.readouterr().out
    a = xr.load_dataset(tmp_path / "stage" / "dataset.nc", engine="h5netcdf")
    b = xr.load_dataset(tmp_path / "file" / "dataset.nc", engine="h5netcdf")
    xr.testing.assert_allclose(a, b, rtol=0, atol=0)
    assert dict(a.sizes) == {"kappa": 2, "n_context": 2, "seed": 1, "save": 40}
    for run in ("stage", "file"):  # the settings every point shares: not the swept ones
        shared = json.loads(xr.load_dataset(tmp_path / run / "sweep.nc", engine="h5netcdf").attrs["settings"])
        assert shared["d"] == "3" and shared["t1"] == "200.0" and not {"kappa", "n_context"} & set(shared)
    # float64 throughout: the flow sits at the minimum, where the loss is quadratic in the parameters' error, so it
    # meets the closed form to rounding; an integer axis traced as int32 made 1/N float32 (off by 2e-8 at N = 5)
    np.testing.assert_allclose(a.final_loss.values, a.theory_min_loss.values, rtol=1e-12)


def test_a_trained_stage_sweeps_steps_and_seeds_and_shows_each_claims_margin(tmp_path):
    """The trained stages (Fig. 2 of Gatmiry here, tiny) run over the training length and the PRNG seed: each
    point is the run's own computation at that seed (the same numbers as `fig2_sweep` from the run's key), the
    stage's own ``seed`` dimension (its models' seeds) is kept apart as ``stage_seed``, and the verdict table shows
    each not-asserted claim's margin at every point, which is how the training that makes a claim hold is found."""
    import jax

    tiny = {"curve_windows": 2, "test_batch": 500, "seeds": 1, "fig2_windows": [0.0, 0.5]}
    ds = stage_sweep.sweep_stage(
        "gatmiry2024:fig2_gaussian_x", {"steps": [20, 40], "seed": [0, 1]}, overrides=tiny, out=tmp_path
    )
    assert ds.test_loss.dims[:3] == ("k", "looped", "stage_seed") and ds.sizes["seed"] == 2
    cfg = stage_sweep.settings.apply(G.SIZES["quick"], {**tiny, "steps": 40, "seed": 1})
    with jax.enable_x64(False):
        direct = G.fig2_sweep(cfg, jax.random.fold_in(jax.random.PRNGKey(1), 4))
    np.testing.assert_array_equal(ds.test_loss.sel(steps=40, seed=1).values, direct.test_loss.values)
    assert not np.array_equal(ds.test_loss.sel(steps=40, seed=0).values, direct.test_loss.values)
    claims = list(ds.check_claim.values)
    ood = next(i for i, c in enumerate(claims) if "out-of-distribution" in c)
    assert all(str(m).endswith("(worst looped ÷ multilayer)") for m in ds.margin.isel(check=ood).values.ravel())
    assert "(worst looped ÷ multilayer)" in stage_sweep.verdict_table(ds)


def test_every_trained_model_of_the_papers_has_a_stage_to_sweep():
    listed = stage_sweep.stages()
    for stage in (
        "zhang2023:fig1_gpt2",
        "gatmiry2024:fig1_gaussian_x",
        "gatmiry2024:fig2_gaussian_x",
        "yang2024:transformers",
        "algoformer:regression",
        "algoformer:ar",
        "algoformer:cot",
        "algoformer:fig5",
    ):
        assert stage in listed and listed[stage]


def test_a_claim_that_quotes_a_swept_setting_reads_by_point(tmp_path):
    """Gatmiry's construction claims quote ε ("depth for worst error ≤ 0.01 …"): over a grid of ε the dataset and the
    verdict table word them for every point, not with the first point's ε."""
    ds = stage_sweep.sweep_stage("gatmiry2024:constructions", {"eps": [1e-2, 1e-7]}, out=tmp_path)
    claims = [str(c) for c in ds["check_claim"].values]
    assert "depth for worst error ≤ [by point] grows like κ·log(1/ε) (gd)" in claims
    assert not any("0.01" in c or "1e-07" in c for c in claims)
    assert "≤ [by point] grows like √κ·log(1/ε) (chebyshev) | 2 pass" in stage_sweep.verdict_table(ds)
