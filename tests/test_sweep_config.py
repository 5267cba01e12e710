"""`jaxicl sweep CONFIG`: bad configs name the key; a good one writes dataset.nc and plot.png."""

import pytest
import xarray as xr

from jaxicl import cli
from jaxicl.sweep_config import ConfigError, load_config


@pytest.mark.parametrize(
    "body,match",
    [
        ("[grid]\nkappa = [1.0]\n[task]\nwidth = 3\n", "task.width"),
        ("[grid]\nkappa = [1.0]\n[dynamics]\nt1 = 'long'\n", "dynamics.t1 must be float"),
        ("[grid]\nkappa = []\n", "grid.kappa is empty"),
        ("[grid]\nn_context = [5, 2.5]\n", r"grid.n_context\[1\] must be int"),
        ("[grid]\ndepth = [1]\n", "grid.depth"),
        ("[solver]\nx = 1\n", r"unknown section \[solver\]"),
        ("[task]\nd = 3\n", r"\[grid\] needs at least one axis"),
        ("[grid]\nkappa = [0.5]\n", r"grid.kappa\[0\] must be >= 1"),
        # values in range: each names its key and the value (issue 39)
        ("[grid]\nkappa = [nan, 2.0]\n", r"grid.kappa\[0\] must be finite, got nan"),
        ("[grid]\nkappa = [2.0, inf]\n", r"grid.kappa\[1\] must be finite, got inf"),
        ("[grid]\nkappa = [[1.0, 2.0]]\n", r"grid.kappa\[0\] must be float, got list"),
        ("[grid]\nseed = [0, -1]\n", r"grid.seed\[1\] must be >= 0, got -1"),
        ("[grid]\nseed = [0]\n[dynamics]\nt1 = -5.0\n", r"dynamics.t1 must be > 0, got -5.0"),
        ("[grid]\nseed = [0]\n[dynamics]\nt1 = 0\n", r"dynamics.t1 must be > 0, got 0"),
        ("[grid]\nseed = [0]\n[dynamics]\nt1 = nan\n", r"dynamics.t1 must be finite, got nan"),
        ("[grid]\nseed = [0]\n[dynamics]\nn_save = 0\n", r"dynamics.n_save must be >= 2, got 0"),
        ("[grid]\nseed = [0]\n[dynamics]\nrtol = -1.0\n", r"dynamics.rtol must be > 0, got -1.0"),
        ("[grid]\nseed = [0]\n[dynamics]\natol = 0.0\n", r"dynamics.atol must be > 0, got 0.0"),
        ("[grid]\nseed = [0]\n[task]\nkappa = inf\n", r"task.kappa must be finite, got inf"),
        ("[grid]\nseed = [0]\n[task]\nd = 0\n", r"task.d must be >= 1, got 0"),
        ("[grid]\nseed = [0]\n[model]\nsigma = -0.1\n", r"model.sigma must be > 0, got -0.1"),
        ("[grid]\nseed = [0]\n[model]\nsigma = nan\n", r"model.sigma must be finite, got nan"),
        ("[grid]\nseed = [0]\n[outputs]\nchunk_size = 0\n", r"outputs.chunk_size must be >= 1, got 0"),
        ("[grid]\nseed = [0]\n[outputs]\ndir = '/dev/null'\n", r"outputs.dir = '/dev/null' is a file"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, body, match):
    path = tmp_path / "c.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


def test_a_directory_or_unreadable_file_as_the_config_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="is a directory: give the path of a TOML file"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="bin.toml"):
        load_config(tmp_path / "bin.toml")


def test_cli_sweep_writes_dataset_and_plot(tmp_path, capsys):
    out = tmp_path / "out"
    path = tmp_path / "c.toml"
    path.write_text(
        "[task]\nd = 2\n[dynamics]\nt1 = 50.0\nn_save = 5\n"
        f"[grid]\nkappa = [1.0, 2.0]\nn_context = [5, 10]\n[outputs]\ndir = '{out}'\nchunk_size = 4\n"
    )
    assert cli.main(["sweep", str(path)]) == 0
    ds = xr.open_dataset(out / "dataset.nc", engine="h5netcdf")
    assert ds["final_loss"].dims == ("kappa", "n_context", "seed")
    assert ds["loss_curve"].dims == ("kappa", "n_context", "seed", "save")
    assert (out / "plot.png").stat().st_size > 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid]\nkappa = []\n")
    assert cli.main(["sweep", str(bad)]) == 2
    assert "grid.kappa is empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    "order", [("n_context", "seed", "kappa"), ("kappa", "n_context", "seed"), ("seed", "kappa", "n_context")]
)
def test_the_sweep_plot_draws_each_points_loss_beside_its_closed_form(order):
    """plot.png, for any order of the grid's axes: per value of the second axis, the dashed line is Lemma 5.3's
    minimum at each value of the first axis, the markers are every seed's loss at t1 there, and the right panel's
    markers are their relative distance to the minimum (at least 1e-16, for the log scale)."""
    import numpy as np

    from jaxicl.experiments.lsa_sweep import default_plot

    coords = {"kappa": [1.0, 4.0, 16.0], "n_context": [5, 10], "seed": [0, 1]}
    dims = ("kappa", "n_context", "seed")
    theory = np.array([[[1.0, 1.0], [0.5, 0.5]], [[3.0, 3.0], [2.0, 2.0]], [[9.0, 9.0], [7.0, 7.0]]])
    flow = theory * (1 + np.arange(12).reshape(3, 2, 2) * 1e-3)
    ds = xr.Dataset({"final_loss": (dims, flow), "theory_min_loss": (dims, theory)}, coords=coords).transpose(*order)
    fig = default_plot(ds)
    left, right = fig.axes
    first, second = [d for d in order if d != "seed"]
    assert left.get_xlabel().startswith({"kappa": "κ", "n_context": "N"}[first])
    for j, v in enumerate(coords[second]):
        at = ds.sel({second: v}).transpose(first, "seed")
        dashed = [ln for ln in left.lines if ln.get_linestyle() == "--" and ln.get_color() == f"C{j}"]
        dots = [ln for ln in left.lines if ln.get_marker() == "o" and ln.get_color() == f"C{j}"]
        (gaps,) = [ln for ln in right.lines if ln.get_color() == f"C{j}"]
        np.testing.assert_array_equal(dashed[0].get_xydata(), np.c_[coords[first], at.theory_min_loss[:, 0]])
        xs = np.repeat(coords[first], 2)
        np.testing.assert_array_equal(dots[0].get_xydata(), np.c_[xs, at.final_loss.values.ravel()])
        rel = np.abs(at.final_loss - at.theory_min_loss) / at.theory_min_loss
        floored = np.maximum(rel.values.ravel(), 1e-16)  # a point at the minimum to rounding, on the log scale
        np.testing.assert_allclose(gaps.get_xydata(), np.c_[xs, floored], rtol=1e-12)
