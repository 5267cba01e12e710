"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

MathJax is served from the built site itself, so that the equations render with no network: its self-contained SVG
bundle (``tex-svg.js``: no font files), shipped by the ``django-static-mathjax`` wheel of the ``docs`` extra, is
copied to ``site/assets/mathjax/`` after the build; ``docs/javascripts/mathjax.js`` configures it for the
``pymdownx.arithmatex`` spans (``$…$`` and ``$$…$$`` in the pages)."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

MATHJAX = ("static", "mathjax", "es5", "tex-svg.js")


def on_post_build(config, **kwargs) -> None:
    source = resources.files("mathjax").joinpath(*MATHJAX)
    target = Path(config["site_dir"]) / "assets" / "mathjax" / "tex-svg.js"
    target.parent.mkdir(parents=True, exist_ok=True)
    with resources.as_file(source) as path:
        shutil.copyfile(path, target)
