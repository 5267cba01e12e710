"""jaxicl.runtime.placement: latency-bound work on the host CPU, throughput-bound work on the accelerator, overridable;
every ``--jobs`` process places its own work by the run's mode. On this CPU-only machine an accelerator is simulated
where the rule needs one (its device is the CPU's: what is checked is the decision)."""

import jax
import jax.numpy as jnp
import pytest

import jaxicl as icl
from jaxicl import cli
from jaxicl.runtime import placement


@pytest.fixture
def fake_accelerator(monkeypatch):
    """A machine whose default backend is an accelerator (here: the CPU device stands in for it)."""
    gpu = jax.devices()[0]
    monkeypatch.setattr(placement, "has_accelerator", lambda: True)
    monkeypatch.setattr(placement, "accelerator", lambda: gpu)
    return gpu


def test_a_cpu_only_machine_places_nothing():
    """auto and cpu change nothing where JAX's default backend is the CPU; gpu is an error naming the devices."""
    assert not placement.has_accelerator()
    for mode in ("auto", "cpu"):
        with placement.use(mode):
            assert placement.device_for("latency") is None and placement.device_for("throughput") is None
            assert placement.platform_for("throughput") == "cpu"
            assert placement.devices_for("throughput") == jax.devices()
    with pytest.raises(RuntimeError, match=r"--device gpu: this machine has no accelerator.*devices present: cpu"):
        with placement.use("gpu"):
            pass
    with pytest.raises(ValueError, match="the device mode must be one of auto, cpu, gpu, got 'tpu'"):
        with placement.use("tpu"):
            pass
    with pytest.raises(ValueError, match="kind must be one of"):
        placement.device_for("fast")


def test_the_rule_and_its_overrides_with_an_accelerator(fake_accelerator, monkeypatch):
    cpu = jax.devices("cpu")[0]
    assert placement.device_for("latency") == cpu  # auto: sequential small work on the host
    assert placement.device_for("throughput") == fake_accelerator  # auto: the accelerator, explicitly (from inside
    with placement.on("latency"):  # an outer on("latency") too)
        assert placement.device_for("throughput") == fake_accelerator
    with placement.use("cpu"):  # the override is honoured for both kinds
        assert placement.device_for("latency") == cpu and placement.device_for("throughput") == cpu
        assert placement.devices_for("throughput") == jax.devices("cpu")
    with placement.use("gpu"):
        assert placement.device_for("latency") == fake_accelerator
    monkeypatch.setenv(placement.ENV, "cpu")
    assert placement.mode() == "cpu"
    monkeypatch.setenv(placement.ENV, "fast")
    with pytest.raises(ValueError, match=r"\$JAXICL_DEVICE must be one of"):
        placement.mode()


def test_throughput_bound_entry_points_place_themselves(monkeypatch):
    """train, sweep and mc_loss over >= LARGE_BATCH prompts enter on("throughput") from the host; a small batch, or a
    call inside a trace, does not."""
    kinds = []
    real_on = placement.on

    def spy(kind):
        kinds.append(kind)
        return real_on(kind)

    monkeypatch.setattr(placement, "on", spy)
    task = icl.tasks.LinearRegression(2, 4)
    model = icl.models.LinearSelfAttention.balanced_init(2, 0.1, jax.random.PRNGKey(0))
    icl.mc_loss(model, task, jax.random.PRNGKey(1), batch=100)
    assert kinds == []
    icl.mc_loss(model, task, jax.random.PRNGKey(1), placement.LARGE_BATCH, chunk_size=placement.LARGE_BATCH)
    assert kinds == ["throughput"]
    jax.jit(lambda k: icl.mc_loss(model, task, k, batch=placement.LARGE_BATCH))(jax.random.PRNGKey(2))
    assert kinds == ["throughput"]  # traced: the caller places it
    icl.sweep(lambda x: {"y": x**2}, {"x": [1.0, 2.0]})
    assert kinds == ["throughput"] * 2
    icl.train(lambda m, k, s: jnp.sum(m**2), jnp.ones(2), 2, jax.random.PRNGKey(0), chunk_size=2, progress=False)
    assert kinds == ["throughput"] * 3


def test_stages_record_their_device_and_the_report_shows_it():
    from jaxicl.experiments.report import timing_table
    from jaxicl.runtime.profiling import StageTimer

    timer = StageTimer()
    with placement.on("latency"):
        jnp.ones(3).sum().block_until_ready()
    stage = timer.lap("closed forms")
    assert stage.device == "cpu" and " on cpu:" in stage.describe()
    table = "\n".join(timing_table(timer.stages))
    assert "| stage | device | wall (s) |" in table and "| closed forms | cpu |" in table and "| total | cpu |" in table


def test_device_gpu_on_a_machine_without_one_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["reproduce", "ahn2023", "--device", "gpu", "--no-cache", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "jaxicl: --device gpu: this machine has no accelerator" in err and "devices present: cpu" in err
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "ahn2023", "--device", "tpu"])  # argparse: invalid choice


def test_jobs_children_get_their_device(tmp_path, monkeypatch):
    """_run_in_processes hands every child the run's --device, ``auto`` included: each process puts its own
    throughput-bound work (training) on the accelerator, which they share, rather than all but one training on the
    host CPU (on an H200 with five papers at once the host-bound trainings ran at CPU speed, benchmarks/README.md)."""
    import pickle
    import sys

    import jaxicl.experiments as E
    from jaxicl.experiments.report import PaperResult

    devices = []

    def fake_child(name, size, out, progress, end, transformers, result_file, threads=None, part=None, device=None):
        devices.append(device)
        data = pickle.dumps([PaperResult(name, name, size, [], [], [], 0.0)])
        return [sys.executable, "-c", f"import time; time.sleep(1.0); open({str(result_file)!r}, 'wb').write({data!r})"]

    monkeypatch.setattr(E, "_child_command", fake_child)
    names = ["gatmiry2024", "yang2024"]  # without their transformers each runs whole
    E._run_in_processes(names, "quick", tmp_path, False, None, False, jobs=2)
    assert devices == ["auto"] * 2
    devices.clear()
    with placement.use("cpu"):
        E._run_in_processes(names, "quick", tmp_path, False, None, False, jobs=2)
    assert devices == ["cpu"] * 2
