"""Execute the notebooks in place and keep their outputs (``make notebooks``), so that the documentation site shows
their figures: ``python notebooks/execute.py [NAME ...]``.

Each executed notebook records the hash of its code cells (``metadata.jaxicl.source_sha256``), with the date and the
jax version: tests/test_notebooks.py refuses a notebook whose code changed after its outputs were made, and checks
the stored outputs with the same assertions as a fresh run.
"""

from __future__ import annotations

import datetime
import hashlib
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def source_hash(nb) -> str:
    """sha256 of the notebook's code cells, in order (what its outputs depend on)."""
    code = "\n# ---\n".join(
        c.source for c in nb.cells if c.cell_type == "code"
    )
    return hashlib.sha256(code.encode()).hexdigest()


def execute(path: Path) -> None:
    import jax

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    nb.metadata["jaxicl"] = {
        "source_sha256": source_hash(nb),
        "executed": datetime.date.today().isoformat(),
        "jax": jax.__version__,
    }
    for cell in (
        nb.cells
    ):  # execution counts and timings change on every run: not kept
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.stem for p in HERE.glob("*.ipynb"))
    for name in names:
        print(f"executing notebooks/{name}.ipynb", flush=True)
        execute(HERE / f"{name}.ipynb")
