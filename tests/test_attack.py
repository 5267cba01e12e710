"""The command line attacked as a hostile new user would (issue 51's target: at least 100 cases, each run as its own
``python -P -m jaxicl.cli`` process in an empty working directory).

A case is good when the command ends within its time limit with the exit status expected (2: refused, bad input;
0: done), prints no traceback, and a refusal is one message (one line on stderr, starting ``jaxicl``). The cases that
must refuse are chosen so that a run that accepted them would start real work: a refusal after work, a hang or a
crash fails its case. ``slow``: about 110 interpreters starting JAX (run ``pytest -m slow tests/test_attack.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

LIMIT = 120  # seconds a case may take: a refusal takes the interpreter's start and the settings check


def _file(name: str, text: str | bytes):
    def make(cwd: Path):
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return make


def _dir(name: str):
    return lambda cwd: (cwd / name).mkdir(parents=True, exist_ok=True)


R, Z, G, Y, A = "zhang2023", "ahn2023", "gatmiry2024", "yang2024", "algoformer"
SWEEP = ["sweep", "--stage", "lsa:flow"]

# (case, arguments after `jaxicl`, expected exit status, set-up in the working directory or None)
CASES = [
    # names, flags and their values
    ("unknown paper", ["reproduce", "nosuch"], 2, None),
    ("unknown paper among known ones", ["reproduce", G, "nosuch"], 2, None),
    ("paper name with a path", ["reproduce", "../../etc/passwd"], 2, None),
    ("jobs zero", ["reproduce", G, "--jobs", "0"], 2, None),
    ("jobs negative", ["reproduce", G, "--jobs", "-3"], 2, None),
    ("jobs not a number", ["reproduce", G, "--jobs", "two"], 2, None),
    ("budget zero", ["reproduce", G, "--budget", "0"], 2, None),
    ("budget negative", ["reproduce", G, "--budget", "-5"], 2, None),
    ("budget nan", ["reproduce", G, "--budget", "nan"], 2, None),
    ("budget text", ["reproduce", G, "--budget", "soon"], 2, None),
    ("quick and full", ["reproduce", G, "--quick", "--full"], 2, None),
    ("device tpu", ["reproduce", G, "--device", "tpu"], 2, None),
    ("device gpu without one", ["reproduce", G, "--device", "gpu"], 2, None),
    ("unknown flag", ["reproduce", G, "--fast"], 2, None),
    ("no command", [], 2, None),
    ("unknown command", ["train"], 2, None),
    ("part without a result file", ["reproduce", A, "--part", "fig5"], 2, None),
    # --set: syntax
    ("set without =", ["reproduce", R, "--set", "d"], 2, None),
    ("set without value", ["reproduce", R, "--set", "d="], 2, None),
    ("set without key", ["reproduce", R, "--set", "=3"], 2, None),
    ("set not TOML", ["reproduce", R, "--set", "d=three"], 2, None),
    ("set unclosed list", ["reproduce", R, "--set", "cs=[1,2"], 2, None),
    ("set unknown key", ["reproduce", R, "--set", "dimension=3"], 2, None),
    ("set unknown nested key", ["reproduce", R, "--set", "gpt2.width=3"], 2, None),
    ("set nested key of a flat one", ["reproduce", R, "--set", "d.x=3"], 2, None),
    ("set on two papers", ["reproduce", R, G, "--set", "seed=1"], 2, None),
    ("set on every paper", ["reproduce", "--set", "seed=1"], 2, None),
    (
        "set a transformer setting while skipped",
        ["reproduce", R, "--skip-transformers", "--set", "gpt2.steps=2"],
        2,
        None,
    ),
    # --set: values outside each paper's domain
    ("zhang d list", ["reproduce", R, "--set", "d=[1,2]"], 2, None),
    ("zhang d real", ["reproduce", R, "--set", "d=3.5"], 2, None),
    ("zhang d negative", ["reproduce", R, "--set", "d=-1"], 2, None),
    ("zhang d boolean", ["reproduce", R, "--set", "d=true"], 2, None),
    ("zhang d huge", ["reproduce", R, "--set", "d=100000"], 2, None),
    ("zhang d past int32", ["reproduce", R, "--set", "d=4294967296"], 2, None),
    ("zhang sigma negative", ["reproduce", R, "--set", "sigma=-0.1"], 2, None),
    ("zhang sigma inf", ["reproduce", R, "--set", "sigma=inf"], 2, None),
    ("zhang sigma nan", ["reproduce", R, "--set", "sigma=nan"], 2, None),
    ("zhang sigma text", ["reproduce", R, "--set", 'sigma="big"'], 2, None),
    ("zhang t1 zero-size list", ["reproduce", R, "--set", "t1=[]"], 2, None),
    ("zhang Ns empty", ["reproduce", R, "--set", "gpt2.Ns=[]"], 2, None),
    ("zhang Ns with text", ["reproduce", R, "--set", 'gpt2.Ns=[10,"a"]'], 2, None),
    ("zhang Ns nested", ["reproduce", R, "--set", "gpt2.Ns=[[10]]"], 2, None),
    ("zhang heads not dividing width", ["reproduce", R, "--set", "gpt2.n_heads=3"], 2, None),
    ("zhang width huge", ["reproduce", R, "--set", "gpt2.d_model=1048576", "--set", "gpt2.n_heads=1"], 2, None),
    ("zhang dtype int8", ["reproduce", R, "--set", 'gpt2.compute_dtype="int8"'], 2, None),
    ("zhang dtype float16", ["reproduce", R, "--set", 'gpt2.compute_dtype="float16"'], 2, None),
    ("zhang curriculum number", ["reproduce", R, "--set", "gpt2.curriculum=1"], 2, None),
    ("zhang mc_batch zero", ["reproduce", R, "--set", "mc_batch=0"], 2, None),
    ("zhang cs negative", ["reproduce", R, "--set", "cs=[-1.0]"], 2, None),
    ("ahn scales of the wrong length", ["reproduce", Z, "--set", "scales=[1.0,1.0]"], 2, None),
    ("ahn one layer", ["reproduce", Z, "--set", "n_layers=1"], 2, None),
    ("ahn depth zero", ["reproduce", Z, "--set", "depths=[0,1]"], 2, None),
    ("ahn contexts empty", ["reproduce", Z, "--set", "contexts=[]"], 2, None),
    ("ahn seeds zero", ["reproduce", Z, "--set", "seeds=0"], 2, None),
    ("ahn lr nan", ["reproduce", Z, "--set", "adam_lr=nan"], 2, None),
    ("ahn target negative", ["reproduce", Z, "--set", "excess_target=-0.5"], 2, None),
    ("ahn train batch huge", ["reproduce", Z, "--set", "train_batch=2000000000"], 2, None),
    ("gatmiry eps one", ["reproduce", G, "--set", "eps=1.0"], 2, None),
    ("gatmiry eps zero", ["reproduce", G, "--set", "eps=0"], 2, None),
    ("gatmiry thm3 eps two", ["reproduce", G, "--set", "thm3_eps=2"], 2, None),
    ("gatmiry steps below windows", ["reproduce", G, "--set", "steps=5"], 2, None),
    ("gatmiry steps past int32", ["reproduce", G, "--set", "steps=1000000000000"], 2, None),
    ("gatmiry depths below fg depths", ["reproduce", G, "--set", "depths=[1,2]"], 2, None),
    ("gatmiry kappa below one", ["reproduce", G, "--set", "kappas=[0.5,2.0]"], 2, None),
    ("gatmiry kappas empty", ["reproduce", G, "--set", "kappas=[]"], 2, None),
    ("gatmiry window past one", ["reproduce", G, "--set", "fig2_windows=[0.0,1.5]"], 2, None),
    ("gatmiry k zero", ["reproduce", G, "--set", "fig2_ks=[0,2]"], 2, None),
    ("gatmiry fg depth past depths", ["reproduce", G, "--set", "fg_depths=[1,20]"], 2, None),
    ("gatmiry seeds zero", ["reproduce", G, "--set", "seeds=0"], 2, None),
    ("gatmiry batch huge", ["reproduce", G, "--set", "test_batch=2000000000"], 2, None),
    ("gatmiry lr text", ["reproduce", G, "--set", 'lr="fast"'], 2, None),
    ("yang record_every not dividing", ["reproduce", Y, "--set", "record_every=7"], 2, None),
    ("yang N not below K", ["reproduce", Y, "--set", "N=400"], 2, None),
    ("yang fig3 N past K", ["reproduce", Y, "--set", "fig3_Ns=[500]"], 2, None),
    ("yang heads not dividing width", ["reproduce", Y, "--set", "transformer.heads=7"], 2, None),
    ("yang th_steps not a multiple of 100", ["reproduce", Y, "--set", "th_steps=150"], 2, None),
    ("yang eps zero", ["reproduce", Y, "--set", "eps=0"], 2, None),
    ("yang tau negative", ["reproduce", Y, "--set", "tau=-0.01"], 2, None),
    ("yang heads list empty", ["reproduce", Y, "--set", "fig4_heads=[]"], 2, None),
    ("algoformer loops reversed", ["reproduce", A, "--set", "loops=[3,5]"], 2, None),
    ("algoformer loops one number", ["reproduce", A, "--set", "loops=[4]"], 2, None),
    ("algoformer fig5 T past iterations", ["reproduce", A, "--set", "fig5_loops=[[50,1]]"], 2, None),
    ("algoformer ar_q past ar_N", ["reproduce", A, "--set", "ar_q=20"], 2, None),
    ("algoformer ar_gain zero", ["reproduce", A, "--set", "ar_gain=0"], 2, None),
    ("algoformer ar_gain nan", ["reproduce", A, "--set", "ar_gain=nan"], 2, None),
    ("algoformer dtype int8", ["reproduce", A, "--set", 'compute_dtype="int8"'], 2, None),
    ("algoformer unknown part", ["reproduce", A, "--set", 'parts=["nosuch"]'], 2, None),
    ("algoformer no parts", ["reproduce", A, "--set", "parts=[]"], 2, None),
    ("algoformer sigma negative", ["reproduce", A, "--set", "sigmas=[-1.0]"], 2, None),
    ("algoformer curriculum negative", ["reproduce", A, "--set", "curriculum_every=-1"], 2, None),
    ("algoformer batch huge", ["reproduce", A, "--set", "batch=1073741824"], 2, None),
    # --config files
    ("config missing", ["reproduce", G, "--config", "missing.toml"], 2, None),
    ("config a directory", ["reproduce", G, "--config", "cfgdir"], 2, _dir("cfgdir")),
    ("config /dev/zero", ["reproduce", G, "--config", "/dev/zero"], 2, None),
    ("config /dev/null", ["reproduce", G, "--config", "/dev/null"], 2, None),
    ("config not TOML", ["reproduce", G, "--config", "c.toml"], 2, _file("c.toml", "d = = 3\n")),
    ("config binary", ["reproduce", G, "--config", "c.toml"], 2, _file("c.toml", bytes(range(256)))),
    ("config over 1 MiB", ["reproduce", G, "--config", "c.toml"], 2, _file("c.toml", "# x\n" * 300_000)),
    ("config unknown key", ["reproduce", G, "--config", "c.toml"], 2, _file("c.toml", "depth = 3\n")),
    ("config unknown table", ["reproduce", R, "--config", "c.toml"], 2, _file("c.toml", "[gpt3]\nsteps = 3\n")),
    ("config bad nested value", ["reproduce", R, "--config", "c.toml"], 2, _file("c.toml", "[gpt2]\nsteps = -3\n")),
    ("config on two papers", ["reproduce", R, G, "--config", "c.toml"], 2, _file("c.toml", "seed = 1\n")),
    (
        "config bad, set another",
        ["reproduce", G, "--config", "c.toml", "--set", "d=8"],
        2,
        _file("c.toml", "eps = 2.0\n"),
    ),
    # --out
    ("out is a file", ["reproduce", G, "--out", "f"], 2, _file("f", "x")),
    ("out under a file", ["reproduce", G, "--out", "f/sub"], 2, _file("f", "x")),
    ("out in use", ["reproduce", G, "--out", "o"], 2, None),  # set-up below: a process holds o's lock
    # sweeps
    ("stage unknown", SWEEP[:2] + ["lsa:nosuch", "--grid", "kappa=[2]"], 2, None),
    ("stage without colon", SWEEP[:2] + ["lsa", "--grid", "kappa=[2]"], 2, None),
    ("stage without a grid", SWEEP, 2, None),
    (
        "grid of 64M points",
        SWEEP
        + [
            "--grid",
            f"kappa={list(range(1, 401))}",
            "--grid",
            f"d={list(range(1, 401))}",
            "--grid",
            f"N={list(range(1, 401))}",
        ],
        2,
        None,
    ),
    ("grid duplicates", SWEEP + ["--grid", "kappa=[2,2]"], 2, None),
    ("grid duplicates as reals", SWEEP + ["--grid", "eps=[1e-6,1e-6]"], 2, None),
    ("grid empty", SWEEP + ["--grid", "kappa=[]"], 2, None),
    ("grid not a list", SWEEP + ["--grid", "kappa=2"], 2, None),
    ("grid unknown setting", SWEEP + ["--grid", "kapa=[2]"], 2, None),
    ("grid nan", SWEEP + ["--grid", "kappa=[nan]"], 2, None),
    ("grid value outside the domain", SWEEP + ["--grid", "kappa=[0.5]"], 2, None),
    ("grid with a bad set", SWEEP + ["--grid", "kappa=[2]", "--set", "d=0"], 2, None),
    ("sweep file missing", ["sweep", "missing.toml"], 2, None),
    ("sweep file and stage", ["sweep", "s.toml", "--stage", "lsa:flow"], 2, _file("s.toml", "[grid]\nkappa=[2]\n")),
    ("sweep file not TOML", ["sweep", "s.toml"], 2, _file("s.toml", "[grid\n")),
    ("sweep file unknown section", ["sweep", "s.toml"], 2, _file("s.toml", "[grids]\nkappa = [2]\n")),
    ("sweep file bad value", ["sweep", "s.toml"], 2, _file("s.toml", "[grid]\nkappa = [-2]\n")),
    ("sweep file /dev/zero", ["sweep", "/dev/zero"], 2, None),
    # config, list, help
    ("config unknown paper", ["config", "nosuch"], 2, None),
    ("config of a paper", ["config", G], 0, None),
    ("config full size", ["config", R, "--full"], 0, None),
    ("list", ["list"], 0, None),
    ("help", ["--help"], 0, None),
    ("list stages", ["sweep", "--list-stages"], 0, None),
]


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXICL_")}
    env["JAX_PLATFORMS"] = "cpu"
    return {**env, **(extra or {})}


@pytest.mark.parametrize("case, args, status, setup", CASES, ids=[c[0] for c in CASES])
def test_the_command_line_under_attack(case, args, status, setup, tmp_path):
    if setup is not None:
        setup(tmp_path)
    holder = None
    if case == "out in use":
        (tmp_path / "o").mkdir()
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import sys, time; from jaxicl._io import exclusive_output\n"
                    "with exclusive_output(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)"
                ),
                str(tmp_path / "o"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout.readline().strip() == "held"
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-P",
                "-m",
                "jaxicl.cli",
                *args,
                *(["--no-cache"] if args[:1] == ["reproduce"] or args[1:2] == ["--stage"] else []),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            env=_env(),
        )
        seconds = time.perf_counter() - t0
    finally:
        if holder is not None:
            holder.kill()
    err = proc.stderr
    assert "Traceback" not in err, err
    assert proc.returncode == status, (proc.returncode, err[-2000:])
    if status == 2 and args and args[0] in ("reproduce", "sweep", "config"):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith(("jaxicl", "usage:")) or "error:" in err, err
    # nothing a refused command wrote besides what the set-up made (no report, no data, no checkpoint)
    if status == 2:
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".nc", ".png", ".md", ".ckpt")]
        assert not written, written
    print(f"{case}: exit {proc.returncode} in {seconds:.1f} s")
