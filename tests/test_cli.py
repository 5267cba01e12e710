"""`jaxicl list` and `jaxicl reproduce <paper> --quick`: every check passes and the report is written."""



from jaxicl import cli


def test_list(capsys):
    assert cli.main(["list"]) == 0
    assert "zhang2023" in capsys.readouterr().out


def test_unknown_name_is_an_error(capsys):
    assert cli.main(["reproduce", "nope2099", "--out", "unused"]) == 2
    assert "unknown reproduction" in capsys.readouterr().err


def test_reproduce_zhang2023_quick_passes_every_check(tmp_path):
    from jaxicl.experiments import reproduce

    (res,) = reproduce(["zhang2023"], size="quick", out=tmp_path)
    failed = [(c.claim, c.predicted, c.simulated) for c in res.checks if c.passed is False]
    assert not failed
    assert sum(c.passed is True for c in res.checks) >= 18
    report = (tmp_path / "report.md").read_text()
    assert "| claim | predicted | simulated | tolerance | result |" in report
    for rel in res.figures + res.data:
        assert (tmp_path / rel).stat().st_size > 0
        assert rel in report
    import xarray as xr

    ds = xr.open_dataset(tmp_path / "zhang2023" / "thm42.nc", engine="h5netcdf")
    assert set(ds.dims) == {"case", "N", "M"}


def test_reproduce_ahn2023_quick_passes_every_check(tmp_path):
    from jaxicl.experiments import reproduce

    (res,) = reproduce(["ahn2023"], size="quick", out=tmp_path)
    failed = [(c.claim, c.predicted, c.simulated) for c in res.checks if c.passed is False]
    assert not failed
    assert sum(c.passed is True for c in res.checks) >= 15
    report = (tmp_path / "report.md").read_text()
    for rel in res.figures + res.data:
        assert (tmp_path / rel).stat().st_size > 0
        assert rel in report
    import xarray as xr

    ds = xr.open_dataset(tmp_path / "ahn2023" / "depth.nc", engine="h5netcdf")
    assert set(ds.data_vars) >= {"transformer", "gd", "preconditioned_gd", "ols"}
