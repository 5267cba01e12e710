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
