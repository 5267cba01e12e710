"""`jaxicl list` and `jaxicl reproduce <paper> --quick`: every check passes and the report is written."""

import pytest

from jaxicl import cli


def test_list(capsys):
    assert cli.main(["list"]) == 0
    assert "zhang2023" in capsys.readouterr().out


def test_unknown_name_is_an_error(capsys):
    assert cli.main(["reproduce", "nope2099", "--out", "unused"]) == 2
    assert "unknown reproduction" in capsys.readouterr().err


# paper -> (minimum number of passed checks, a data file, variables or dimensions it must hold)
PAPERS = {
    "zhang2023": (18, "thm42.nc", lambda ds: set(ds.dims) == {"case", "N", "M"}),
    "ahn2023": (15, "depth.nc", lambda ds: set(ds.data_vars) >= {"transformer", "gd", "preconditioned_gd", "ols"}),
    "gatmiry2024": (18, "fig1_gaussian_x.nc", lambda ds: set(ds.dims) >= {"kappa", "depth", "looped", "seed"}),
    "yang2024": (17, "fig4.nc", lambda ds: ds.sizes["heads"] == 9 and "excess" in ds),
}


@pytest.mark.parametrize("paper", PAPERS)
def test_reproduce_quick_passes_every_check(paper, tmp_path):
    from jaxicl.experiments import reproduce

    min_passed, nc, holds = PAPERS[paper]
    (res,) = reproduce([paper], size="quick", out=tmp_path)
    failed = [(c.claim, c.predicted, c.simulated) for c in res.checks if c.passed is False]
    assert not failed
    assert sum(c.passed is True for c in res.checks) >= min_passed
    report = (tmp_path / "report.md").read_text()
    assert "| claim | predicted | simulated | tolerance | result |" in report
    for rel in res.figures + res.data:
        assert (tmp_path / rel).stat().st_size > 0
        assert rel in report
    import xarray as xr

    assert holds(xr.open_dataset(tmp_path / paper / nc, engine="h5netcdf"))
