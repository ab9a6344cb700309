"""Sphinx configuration of the ppl-zoo documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html``.
The build needs no network (no intersphinx inventories) and no GPU, and runs no
example: the gallery shows the examples' code with the figures of a recorded
reproduction run (checked in under ``docs/_static/thumbnails`` and
``docs/_data/reproduction``). The model cards, the reproduction report, the benchmark
results and the references are generated from the registry and the recorded data
by the local extension ``docs/_ext/zoo_docs.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")

import ppl_models  # noqa: E402

# -- project ------------------------------------------------------------------------
project = "ppl-zoo"
author = "The ppl-zoo authors"
copyright = "The ppl-zoo authors"  # noqa: A001
release = ppl_models.__version__
version = ".".join(release.split(".")[:2])

# -- extensions -----------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "zoo_docs",
]
# No sphinx.ext.intersphinx: the build must not fetch inventories over the network.

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_data", "_templates", "_gallery_src", "Thumbs.db", ".DS_Store",
                    "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip",
                    "auto_examples/*.md5", "auto_examples/*.json"]
templates_path = ["_templates"]
nitpicky = False

# -- autodoc / autosummary / numpydoc -----------------------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = False  # a module page lists its __all__
autosummary_imported_members = False
autodoc_typehints = "none"  # numpydoc's Parameters sections give the types
autodoc_member_order = "bysource"
# A module page lists its members except those that inference exports (their pages are
# inference.NAME; documenting one object twice makes duplicate targets).
import inference  # noqa: E402

autosummary_context = {"zoo_exported": sorted(set(inference.__all__) - {"persistence"})}
numpydoc_show_class_members = False  # the class template lists the members
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()
numpydoc_attributes_as_param_list = True

# -- MyST -------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- sphinx-gallery ---------------------------------------------------------------------
# The examples are not run at build time (they take minutes to an hour each); each
# gallery entry shows the main figure of the recorded reproduction run as its thumbnail
# (zoo_docs copies it where sphinx-gallery looks for an example's first figure).
sphinx_gallery_conf = {
    "examples_dirs": ["_gallery_src"],  # examples/*.py, staged by zoo_docs
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"^$",  # execute nothing ...
    "plot_gallery": "False",     # ... and do not even try
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "min_reported_time": 10**9,
    "show_memory": False,
    "show_signature": False,
    "capture_repr": (),
    "reference_url": {},
    "first_notebook_cell": None,
}

# -- HTML -------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"ppl-zoo {release}"
html_static_path = ["_static"]
html_css_files = ["zoo.css"]
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 8,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": []}

# -- what the local extension generates --------------------------------------------------
zoo_docs_data = str(DOCS / "_data")
