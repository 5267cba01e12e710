"""The documentation site (mkdocs + mkdocstrings, `make docs`): it builds with --strict, its API reference covers
the public names, and every public name has a docstring."""

import html as html_lib
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = [
    "jaxicl",
    "jaxicl.tasks",
    "jaxicl.models",
    "jaxicl.losses",
    "jaxicl.dynamics",
    "jaxicl.baselines",
    "jaxicl.theory.zhang",
    "jaxicl.theory.ahn",
    "jaxicl.theory.gatmiry",
    "jaxicl.theory.yang",
    "jaxicl.runtime",
    "jaxicl.runtime.placement",
    "jaxicl.runtime.jobs",
    "jaxicl.runtime.budget",
    "jaxicl.runtime.xla_options",
    "jaxicl.runtime.compilation_cache",
    "jaxicl.runtime.profiling",
    "jaxicl.experiments.settings",
    "jaxicl.experiments.stage_sweep",
]


def _public(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and getattr(v, "__module__", None) == module.__name__
            and (inspect.isfunction(v) or inspect.isclass(v))
        ]
    return names


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(name):
    module = importlib.import_module(name)
    assert (module.__doc__ or "").strip(), f"{name} has no module docstring"
    missing = [
        n
        for n in _public(module)
        if not inspect.ismodule(getattr(module, n)) and not (inspect.getdoc(getattr(module, n)) or "").strip()
    ]
    assert not missing, f"{name}: no docstring for {missing}"


def test_the_site_builds_strictly_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    home = (site / "index.html").read_text()
    assert "jaxicl reproduce" in home and "<code" in home
    # the API reference is curated: one entry per public object, grouped by concept under its module's docstring,
    # with annotated signatures
    dynamics = (site / "api" / "dynamics" / "index.html").read_text()
    for anchor in (
        "jaxicl.dynamics.flow",
        "jaxicl.dynamics.flow.gradient_flow",
        "jaxicl.dynamics.train.train",
        "jaxicl.dynamics.train.stack_members",
        "jaxicl.dynamics.checkpoint.load_checkpoint",
    ):
        assert f'id="{anchor}"' in dynamics, anchor
    text = re.sub(r"<[^>]+>", "", dynamics)
    assert "diffrax&#39;s adjoint" in text or "diffrax's adjoint" in text  # the module's docstring
    assert "loss_fn: Callable[[PyTree], Float[Array," in text  # the signature's annotations, jaxtyping shapes too
    # names in the signatures link into other projects' documentation through their inventories, which mkdocs.yml
    # reads from docs/inventories (local files: the build never reaches the network)
    api = "".join(page.read_text() for page in (site / "api").rglob("index.html"))
    for target in (
        "https://docs.python.org/3.11/library/functions.html#int",
        "https://docs.jax.dev/en/latest/_autosummary/jax.Array.html#jax.Array",
        "https://docs.kidger.site/equinox/api/module/module/#equinox.Module",
        "https://docs.kidger.site/diffrax/api/adjoints/#diffrax.AbstractAdjoint",
        "https://optax.readthedocs.io/en/latest/api/transformations.html#optax.GradientTransformation",
    ):
        assert f'href="{target}"' in api, target
    inventories = re.findall(r"^\s+- url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert len(inventories) == 6 and all(
        url.startswith("file:docs/inventories/") and (ROOT / url.removeprefix("file:")).is_file() for url in inventories
    ), inventories
    # and the pages load nothing from elsewhere: no web fonts, no scripts or styles from another host
    assert not re.search(r'<(link|script)[^>]+(href|src)="https?://', home + dynamics), "a resource from the network"
    top = (site / "api" / "top-level" / "index.html").read_text()
    for anchor in ("jaxicl.population_loss", "jaxicl.sweep.sweep", "jaxicl.sensitivity.sensitivity"):
        assert f'id="{anchor}"' in top, anchor
    for page in (
        "getting-started",
        "guides/gatmiry",
        "guides/sweeps",
        "guides/gpu",
        "guides/extending",
        "command-line",
        "api/theory",
        "api/runtime",
    ):
        assert (site / page / "index.html").stat().st_size > 5000, page
    # equations: arithmatex spans, typeset by MathJax served from the site itself (no network)
    assert (site / "assets" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000
    losses = (site / "exact-losses" / "index.html").read_text()
    assert (
        'class="arithmatex"' in losses
        and "assets/mathjax/tex-svg.js" in losses
        and "http"
        not in "".join(line for line in losses.splitlines() if "<script" in line and "mathjax" in line.lower())
    )
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):  # rendered with their stored outputs, figures too
        html = (site / "notebooks" / notebook.stem / "index.html").read_text()
        assert "image/png" in html or "<img" in html, notebook.stem
        # its code cells take the text column (prompts hidden: notebooks/ruff.toml keeps the lines within 79 columns)
        assert "stylesheets/notebooks.css" in html, notebook.stem
        assert not re.search(r'<(link|script)[^>]+(href|src)="https?://', html), notebook.stem
    # the navigation shows the notebooks under the titles mkdocs.yml gives them, not their first headings
    titles = re.findall(r"^\s+- (.+): notebooks/\S+\.ipynb$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert len(titles) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    for title in titles:
        assert html_lib.escape(title, quote=False) in home or title in home, title


def test_code_blocks_fit_the_text_column():
    """Every line of a code block in the README and the documentation fits 79 columns, what the site's text column
    shows without a scroll bar in a 1280-pixel window (headless Chromium; the kept reports are data, not pages)."""
    import re

    root = Path(__file__).parent.parent
    pages = [root / "README.md", *sorted(p for p in (root / "docs").rglob("*.md") if "reports" not in p.parts)]
    wide = [
        (str(p.relative_to(root)), line)
        for p in pages
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", p.read_text(), re.S | re.M)
        for line in block.splitlines()
        if len(line) > 79
    ]
    assert not wide, wide


def test_docstrings_write_their_equations_as_math():
    """A subscript or superscript group (``_{…}``, ``^{…}``) in a public docstring sits inside ``$…$`` or ``$$…$$``,
    where MathJax renders it, not in the text, where the site would show the raw TeX."""
    import ast

    tex = re.compile(r"[_^]\{")
    raw = []
    for path in sorted((ROOT / "jaxicl").rglob("*.py")):
        if path.name.startswith("_") and path.name != "__init__.py":
            continue  # private modules are not on the site
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
                continue
            if getattr(node, "name", "").startswith("_"):
                continue
            lines = _tex_outside_math(ast.get_docstring(node) or "", tex, r"``[^`]*``")
            raw += [f"{path.relative_to(ROOT)}: {line}" for line in lines]
    assert not raw, "\n".join(raw)


def _tex_outside_math(text: str, tex: re.Pattern, code: str) -> list[str]:
    """The lines of ``text`` where ``tex`` matches outside ``$…$``, ``$$…$$`` and inline code (``code``: the pattern
    of a code span), i.e. the TeX the site would show raw."""
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$|" + code, "", text, flags=re.S)
    return [line.strip() for line in text.splitlines() if tex.search(line)]


def test_notebook_markdown_writes_its_equations_as_math():
    """The notebooks' Markdown cells too: a subscript or superscript group sits inside ``$…$``, which the site's
    MathJax typesets there (docs/javascripts/mathjax.js processes ``jp-RenderedMarkdown``)."""
    import nbformat

    config = (ROOT / "docs" / "javascripts" / "mathjax.js").read_text()
    assert "jp-RenderedMarkdown" in config and '["$", "$"]' in config
    tex = re.compile(r"[_^]\{|\b\w_\w")
    raw = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                raw += [f"{path.name}: {line}" for line in _tex_outside_math(cell.source, tex, r"`[^`]*`")]
    assert not raw, "\n".join(raw)
