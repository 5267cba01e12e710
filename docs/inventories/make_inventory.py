"""Build the Sphinx inventory (``objects.inv``) of a project documented with mkdocstrings, from its own API pages.

    python docs/inventories/make_inventory.py CHECKOUT OUT.inv

CHECKOUT is the project's source tree at the tag of the installed version (equinox, diffrax); its ``docs/api/**.md``
pages (``::: package.object`` directives) are rendered by mkdocstrings against the installed package, so each entry
carries the page and anchor that the project's own site gives the object. Run by a maintainer when a pinned version
changes; the documentation build only reads the files this writes (no network).
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

CONFIG = """site_name: inventory
docs_dir: docs
theme: {name: material}
markdown_extensions:
  - admonition
  - pymdownx.details
  - pymdownx.superfences
  - pymdownx.arithmatex: {generic: true}
  - pymdownx.snippets: {base_path: docs, check_paths: false}
  - toc: {permalink: true}
plugins:
  - mkdocstrings:
      handlers:
        python:
          options: {force_inspection: true, heading_level: 4, inherited_members: true, members_order: source,
                    show_bases: false, show_if_no_docstring: true, show_root_heading: true, show_root_full_path: true}
"""


def main(checkout: str, out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = pathlib.Path(tmp)
        shutil.copytree(pathlib.Path(checkout) / "docs" / "api", site / "docs" / "api")
        (site / "docs" / "index.md").write_text("# API\n")
        (site / "mkdocs.yml").write_text(CONFIG)
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q"], cwd=site, env=env, check=True)
        shutil.copy(site / "site" / "objects.inv", out)


if __name__ == "__main__":
    main(*sys.argv[1:])
