"""jaxicl.sweep: equals a Python loop, compiles once, shards over devices, resumes after a kill."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
import sweep_helpers as H

import jaxicl as icl
from jaxicl.sweep import SweepConfigError

HERE = Path(__file__).parent


def test_sweep_equals_python_loop_and_a_depth_axis_compiles_once():
    traces = []

    def run(depth, scale):
        traces.append(1)
        return H.depth_product(depth, scale)

    grid = {"depth": list(range(1, 11)), "scale": [0.5, 1.0, 1.5]}
    ds = icl.sweep(run, grid, chunk_size=8)  # 30 points, 4 chunks (last one padded)
    assert len(traces) == 1  # one trace = one compilation for all ten depths
    assert ds["prod"].dims == ("depth", "scale") and ds["curve"].shape == (10, 3, 10)
    single = jax.jit(H.depth_product)
    loop = np.array([[single(d, s)["prod"] for s in grid["scale"]] for d in grid["depth"]])
    np.testing.assert_array_equal(ds["prod"].values, loop)  # bit-for-bit on CPU
    assert ds.attrs["backend"] == "cpu" and ds.attrs["device_count"] == len(jax.devices())
    assert json.loads(ds.attrs["config"])["grid"]["depth"] == grid["depth"]


def test_a_chunk_larger_than_the_grid_computes_the_grids_points_only():
    """A chunk is padded by repeating the grid's last point: ``chunk_size`` = 64 (the TOML sweep's default) for a
    grid of 4 points compiles a chunk of 4 (rounded up to the device count), not 64 points of which 60 are padding."""
    n_dev = len(jax.devices())
    grid = {"depth": [1, 2], "scale": [0.5, 1.0]}
    ds = icl.sweep(H.depth_product, grid, chunk_size=64)
    assert ds.attrs["chunk_size"] == -(-4 // n_dev) * n_dev and ds.attrs["n_chunks"] == 1
    np.testing.assert_array_equal(ds["prod"].values, icl.sweep(H.depth_product, grid, chunk_size=1)["prod"].values)


def test_a_sweep_with_a_chunk_larger_than_the_grid_resumes_under_its_old_and_its_new_chunk(tmp_path):
    """``config.json`` records the requested chunk size, and ``chunk_points`` the one the chunks hold: a rerun
    resumes, and so does a directory written when such a chunk was padded to the requested size."""
    n_dev = len(jax.devices())
    grid = {"depth": [1, 2], "scale": [0.5, 1.0]}
    fresh = icl.sweep(H.depth_product, grid)["prod"].values
    out = tmp_path / "run"
    icl.sweep(H.depth_product, grid, chunk_size=64, out=out)
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["chunk_size"], cfg["chunk_points"]) == (-(-64 // n_dev) * n_dev, -(-4 // n_dev) * n_dev)
    stamps = {f.name: f.stat().st_mtime_ns for f in out.glob("chunk_*.npz")}
    again = icl.sweep(H.depth_product, grid, chunk_size=64, out=out)
    assert stamps and all(f.stat().st_mtime_ns == stamps[f.name] for f in out.glob("chunk_*.npz"))
    np.testing.assert_array_equal(again["prod"].values, fresh)
    # as written before the cap: the requested size, padded, in both fields, and no chunk finished yet
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({**cfg, "chunk_points": cfg["chunk_size"]}))
    resumed = icl.sweep(H.depth_product, grid, chunk_size=64, out=old)
    assert resumed.attrs["chunk_size"] == cfg["chunk_size"]  # the chunks on disk fix the chunk size
    np.testing.assert_array_equal(resumed["prod"].values, fresh)


def test_seed_folds_into_the_key():
    ds = icl.sweep(H.noisy_point, {"x": [0.0, 1.0], "seed": [0, 1, 2]})
    v = ds["value"].values
    assert np.allclose(v[1] - v[0], 1.0)  # same seed, same noise
    assert len(set(np.round(v[0], 12))) == 3  # different seeds, different noise
    again = icl.sweep(H.noisy_point, {"x": [0.0, 1.0], "seed": [0, 1, 2]})
    np.testing.assert_array_equal(again["value"].values, v)


def test_bad_grids_are_errors():
    with pytest.raises(SweepConfigError, match="empty"):
        icl.sweep(H.depth_product, {"depth": [], "scale": [1.0]})
    with pytest.raises(SweepConfigError, match="no argument for grid axis"):
        icl.sweep(H.depth_product, {"depth": [1], "scale": [1.0], "width": [2]})
    with pytest.raises(SweepConfigError, match="seed"):
        icl.sweep(H.noisy_point, {"x": [1.0]})


def _run_in_subprocess(code, env_extra=None, **kw):
    env = {**os.environ, "PYTHONPATH": str(HERE), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", code], env=env, **kw)


def test_four_forced_host_devices_equal_one(tmp_path):
    code = (
        "import jax, numpy as np, jaxicl as icl, sweep_helpers as H\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "assert len(jax.devices()) == 4\n"
        "ds = icl.sweep(H.depth_product, {'depth': list(range(1, 11)), 'scale': [0.5, 1.0, 1.5]}, chunk_size=8)\n"
        "assert ds.attrs['device_count'] == 4\n"
        f"np.save({str(tmp_path / 'four.npy')!r}, ds['curve'].values)\n"
    )
    p = _run_in_subprocess(code, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert p.wait(timeout=300) == 0
    one = icl.sweep(H.depth_product, {"depth": list(range(1, 11)), "scale": [0.5, 1.0, 1.5]}, chunk_size=8)
    np.testing.assert_allclose(np.load(tmp_path / "four.npy"), one["curve"].values, rtol=1e-14, atol=0)


def test_interrupted_sweep_resumes_with_identical_numbers(tmp_path):
    out = tmp_path / "run"
    code = (
        "import jax, jaxicl as icl, sweep_helpers as H\n"
        "jax.config.update('jax_enable_x64', True)\n"
        f"icl.sweep(H.slow_point, H.GRID, chunk_size=2, out={str(out)!r})\n"
    )
    p = _run_in_subprocess(code)
    deadline = time.time() + 240
    while len(list(out.glob("chunk_*.npz"))) < 2 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    done = sorted(out.glob("chunk_*.npz"))
    assert 2 <= len(done) < 8, "the kill should land mid-sweep"
    stamps = {f.name: f.stat().st_mtime_ns for f in done}
    resumed = icl.sweep(H.slow_point, H.GRID, chunk_size=2, out=out)
    assert all(f.stat().st_mtime_ns == stamps[f.name] for f in done)  # finished chunks not recomputed
    fresh = icl.sweep(H.slow_point, H.GRID, chunk_size=2)
    np.testing.assert_array_equal(resumed["value"].values, fresh["value"].values)


def test_different_parameters_under_the_same_out_are_an_error(tmp_path):
    icl.sweep(H.noisy_point, {"x": [0.0], "seed": [0]}, out=tmp_path)
    with pytest.raises(SweepConfigError, match="different sweep.*grid"):
        icl.sweep(H.noisy_point, {"x": [1.0], "seed": [0]}, out=tmp_path)
    with pytest.raises(SweepConfigError, match="meta"):
        icl.sweep(H.noisy_point, {"x": [0.0], "seed": [0]}, out=tmp_path, meta={"noise": 0.1})


# slow: the default suite asserts the same equality (final loss = Lemma 5.3's minimum, rtol 1e-12) on the same
# program through the command line: test_stage_sweep.py::test_the_lsa_toml_sweep_is_one_case_of_a_stage_sweep_...
@pytest.mark.slow
def test_lsa_example_converged_loss_equals_zhang_closed_form_at_every_point():
    from jaxicl.experiments.lsa_sweep import LSAFlowPoint, raise_if_any_flow_failed

    point = LSAFlowPoint(d=3, t1=1000.0, rtol=1e-10, atol=1e-12, n_save=4)
    grid = {"kappa": [1.0, 4.0, 16.0], "n_context": [5, 20], "seed": [0]}
    ds = icl.sweep(
        lambda kappa, n_context, seed, key: point(kappa, n_context, key), grid, output_dims={"loss_curve": ("save",)}
    )
    raise_if_any_flow_failed(ds)
    rel = np.abs(ds["final_loss"] - ds["theory_min_loss"]) / ds["theory_min_loss"]
    assert float(rel.max()) <= 1e-12, rel.values


def test_lsa_flow_failures_are_raised_on_the_host_naming_the_grid_point():
    """The LSA example's program returns the flows' failure flags; the host check names the first failing point."""
    import xarray as xr

    from jaxicl.experiments.lsa_sweep import raise_if_any_flow_failed

    coords = {"kappa": [1.0, 4.0], "n_context": [5, 20]}
    ok = np.zeros((2, 2), bool)
    diverged = ok.copy()
    diverged[1, 0] = True
    ds = xr.Dataset(
        {"flow_diverged": (("kappa", "n_context"), diverged), "flow_solver_failed": (("kappa", "n_context"), ok)},
        coords=coords,
    )
    with pytest.raises(FloatingPointError, match=r"diverged .* at kappa=4.0, n_context=5 \(1 of 4 grid points\)"):
        raise_if_any_flow_failed(ds)
    ds = xr.Dataset(
        {"flow_diverged": (("kappa", "n_context"), ok), "flow_solver_failed": (("kappa", "n_context"), ~ok)},
        coords=coords,
    )
    with pytest.raises(RuntimeError, match=r"stopped before t1.* at kappa=1.0, n_context=5 \(4 of 4"):
        raise_if_any_flow_failed(ds)


def test_two_local_processes_form_a_cluster_and_both_get_the_full_dataset(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import sys, jax\n"
        "jax.config.update('jax_cpu_collectives_implementation', 'gloo')\n"
        f"jax.distributed.initialize(coordinator_address='127.0.0.1:{port}', num_processes=2, "
        "process_id=int(sys.argv[1]))\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "import numpy as np, jaxicl as icl, sweep_helpers as H\n"
        "ds = icl.sweep(H.depth_product, {'depth': list(range(1, 11)), 'scale': [0.5, 1.0, 1.5]}, chunk_size=8)\n"
        "assert ds.attrs['process_count'] == 2 and ds.attrs['device_count'] == 2\n"
        f"np.save({str(tmp_path)!r} + f'/p{{sys.argv[1]}}.npy', ds['curve'].values)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], env=env) for i in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    one = icl.sweep(H.depth_product, {"depth": list(range(1, 11)), "scale": [0.5, 1.0, 1.5]}, chunk_size=8)
    for i in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"p{i}.npy"), one["curve"].values)


def test_a_chunk_over_the_memory_budget_is_split_and_gives_the_same_numbers(tmp_path):
    from jaxicl.sweep import _fitting_chunk, program_bytes

    grid = {"scale": list(np.linspace(0.0, 0.3, 12)), "seed": [0, 1]}  # 24 points
    whole = icl.sweep(H.memory_hungry, grid, memory_budget=2**40)  # one chunk of 24
    assert whole.attrs["n_chunks"] == 1
    # the single program for 24 points needs about 24 × 10.5 MB (XLA's buffer assignment): 64 MB must split it
    one_chunk = _fitting_chunk(
        lambda scale, seed: H.memory_hungry(scale, seed),
        False,
        tuple(jax.devices()),
        (("scale", np.dtype("float64")), ("seed", np.dtype("int32"))),
        24,
        jax.random.PRNGKey(0),
        2**40,
    )[1]
    assert program_bytes(one_chunk) > 64 * 2**20
    split = icl.sweep(H.memory_hungry, grid, memory_budget=64 * 2**20, out=tmp_path / "split")
    assert split.attrs["chunk_size"] < 24 and split.attrs["n_chunks"] > 1
    np.testing.assert_array_equal(split["grad"].values, whole["grad"].values)
    assert json.loads((tmp_path / "split" / "config.json").read_text())["chunk_points"] == split.attrs["chunk_size"]
    # resuming reads the chunk size from disk, whatever the budget now
    again = icl.sweep(H.memory_hungry, grid, out=tmp_path / "split")
    np.testing.assert_array_equal(again["grad"].values, whole["grad"].values)
    with pytest.raises(SweepConfigError, match="one point per device needs"):
        icl.sweep(H.memory_hungry, grid, memory_budget=1000)


def test_grid_values_are_checked_before_any_work(monkeypatch):
    """A NaN or infinite value, a ragged axis, a chunk size that is not an integer and a grid too large for memory are
    errors that name the axis or argument, raised before the grid is built or anything compiled."""
    for grid, match in [
        ({"depth": [1], "scale": [float("nan"), 2.0]}, r"'scale' must hold finite numbers: entry 0"),
        ({"depth": [1], "scale": [1.0, float("inf")]}, r"'scale' must hold finite numbers: entry 1"),
        ({"depth": [1, [2, 3]], "scale": [1.0]}, r"'depth' must be a flat list of numbers: entry 1"),
        ({"depth": [[1, 2], [3, 4]], "scale": [1.0]}, r"'depth' must be a flat list of numbers: entry 0 is \[1, 2\]"),
        ({"depth": "123", "scale": [1.0]}, r"'depth' must be a list of numbers"),
        ({"depth": [1], "scale": ["a"]}, r"'scale' must hold numbers: entry 0 is 'a'"),
        ({"depth": [1], "scale": [1.0, False]}, r"'scale' must hold numbers: entry 1 is False"),
    ]:
        with pytest.raises(SweepConfigError, match=match):
            icl.sweep(H.depth_product, grid)
    with pytest.raises(ValueError, match=r"sweep: chunk_size must be an integer, got 2.5"):
        icl.sweep(H.depth_product, {"depth": [1], "scale": [1.0]}, chunk_size=2.5)
    with pytest.raises(ValueError, match=r"sweep: chunk_size must be >= 1, got 0"):
        icl.sweep(H.depth_product, {"depth": [1], "scale": [1.0]}, chunk_size=0)
    t0 = time.monotonic()
    huge = {"depth": range(1000), "scale": np.zeros(1000), "x": range(1000)}  # 1e9 points: never built
    point = 11 * np.dtype(jax.numpy.result_type(float)).itemsize  # prod + curve (10)
    need = 2 * 10**9 * point / 2**30  # gathered, then stacked
    with pytest.raises(
        SweepConfigError,
        match=rf"the outputs of the grid's 1,000,000,000 points \(1000 x 1000 x 1000; "
        rf"{point} bytes each, .*\) need {need:.3g} GiB",
    ):
        icl.sweep(lambda depth, scale, x: H.depth_product(depth, scale), huge)
    assert time.monotonic() - t0 < 30  # refused from the axes' sizes, not after filling the memory
    import importlib

    S = importlib.import_module("jaxicl.sweep")  # the module (``jaxicl.sweep`` is also the function)
    monkeypatch.setattr(S, "host_memory_bytes", lambda: 4000)  # a machine with 4 kB: 2 × 30 × 88 bytes do not fit
    with pytest.raises(
        SweepConfigError, match=r"the outputs of the grid's 30 points \(10 x 3; 88 bytes each.*more than"
    ):
        # float64 (x64): 11 × 8 bytes a point
        with jax.enable_x64(True):
            icl.sweep(
                H.depth_product,
                {"depth": list(range(1, 11)), "scale": [0.5, 1.0, 1.5]},
                chunk_size=30,
                memory_budget=2**30,
            )


def _finish(out, chunk_size=2):
    return icl.sweep(H.noisy_point, {"x": [0.0, 1.0, 2.0, 3.0], "seed": [0, 1]}, chunk_size=chunk_size, out=out)


def test_a_chunk_of_other_positions_or_unreadable_is_computed_again_with_a_warning(tmp_path):
    """Resume is verified: each chunk file records the grid positions it holds and a digest of its sweep's config. A
    chunk copied over another position, a truncated or garbage one, or one from another sweep is never used: a
    ResumeWarning names the file and why, and the points are computed again (the numbers equal a fresh sweep's)."""
    import shutil

    from jaxicl.sweep import ResumeWarning

    out = tmp_path / "run"
    fresh = _finish(out)["value"].values
    chunks = sorted(out.glob("chunk_*.npz"))
    assert len(chunks) == 4
    cases = {
        "holds grid positions \\[0, 2\\], not \\[6, 8\\)": lambda: shutil.copy(chunks[0], chunks[3]),
        "is unreadable \\(BadZipFile": lambda: chunks[3].write_bytes(chunks[3].read_bytes()[:100]),
        "is unreadable": lambda: chunks[3].write_bytes(b"garbage"),
        "records no grid positions": lambda: np.savez(chunks[3], names=json.dumps(["value"]), leaf_0=np.zeros(2)),
    }
    for match, corrupt in cases.items():
        _finish(out)
        corrupt()
        with pytest.warns(ResumeWarning, match=f"chunk_00003.npz: it {match}.*computing these points again"):
            again = _finish(out)["value"].values
        np.testing.assert_array_equal(again, fresh)
    # a chunk of another sweep (same file name, same positions): its config digest differs
    other = tmp_path / "other"
    icl.sweep(H.noisy_point, {"x": [5.0, 6.0, 7.0, 8.0], "seed": [0, 1]}, chunk_size=2, out=other)
    shutil.copy(other / "chunk_00001.npz", chunks[1])
    with pytest.warns(ResumeWarning, match="chunk_00001.npz: it belongs to another sweep"):
        np.testing.assert_array_equal(_finish(out)["value"].values, fresh)


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b'{"grid": {}}', b"\xff\xfe"])
def test_an_unreadable_config_json_is_an_error_naming_it(tmp_path, content):
    out = tmp_path / "run"
    _finish(out)
    (out / "config.json").write_bytes(content)
    with pytest.raises(SweepConfigError, match=r"config.json is unreadable or not a sweep's config.json.*Delete"):
        _finish(out)


def test_an_out_that_is_a_file_or_read_only_is_an_error_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SweepConfigError, match="the sweep's directory .*file is a file, not a directory"):
        _finish(tmp_path / "file")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            with pytest.raises(SweepConfigError, match="cannot write to the sweep's directory"):
                _finish(ro / "sub")
        finally:
            ro.chmod(0o700)
    if Path("/sys/kernel").is_dir():  # a place that not even root can write to (sysfs)
        with pytest.raises(SweepConfigError, match="cannot write to the sweep's directory /sys/jaxicl-sweep"):
            _finish(Path("/sys/jaxicl-sweep"))
