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
        ("[grid]\nkappa = [0.5]\n", "kappa values must be >= 1"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, body, match):
    path = tmp_path / "c.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


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
