"""The documentation site, built by Sphinx with MyST-NB:

    pip install -e '.[docs]'
    sphinx-build -W --keep-going -b html docs docs/_build/html

MyST-NB executes the tutorials (docs/tutorials) at build time, in a fresh kernel each, and
keeps their outputs in a cache (docs/_build/.jupyter_cache) until their text changes; a
tutorial whose own `assert` fails fails the build. Nothing on the built pages is loaded from
the network: the theme's files and MathJax come with the packages, and widgets are shown in
their offline form.
"""

from __future__ import annotations

import os
from importlib.metadata import version as _version
from pathlib import Path

project = "alignmt"
author = "the alignmt developers"
copyright = "2026, the alignmt developers"
release = _version("alignmt")

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx-mathjax-offline",  # MathJax from the package, not a CDN
]
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
suppress_warnings = ["myst.header"]  # benchmark pages start tables of figures at level 3
default_role = "code"  # `name` in a docstring is code, as in the Markdown pages

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3  # links such as benchmarks.md#serving find their section

nb_execution_mode = "cache"
nb_execution_cache_path = str(Path(__file__).parent / "_build" / ".jupyter_cache")
nb_execution_timeout = 600
nb_execution_in_temp = True  # the run folders a tutorial trains go to a temporary folder
nb_execution_raise_on_error = True
nb_execution_show_tb = True
# what a cell writes to stderr (notices of unknown words, progress) stays off the pages
nb_output_stderr = "remove"
# A widget's saved state would need require.js and the widget manager from a CDN; its
# offline form (HTML) is shown instead.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

# The live explorers: the bottleneck and d2l tutorials export the models they train with
# `alignmt export --web` into live/ here (their kernels read ALIGNMT_DOCS_LIVE), and the build
# copies it into the site, beside the pages that open it. It lives in _build with the
# notebooks' execution cache, so a tutorial the cache does not run again keeps its export.
_EXTRA = Path(__file__).parent / "_build" / "extra"
(_EXTRA / "live").mkdir(parents=True, exist_ok=True)
os.environ["ALIGNMT_DOCS_LIVE"] = str(_EXTRA / "live")
html_extra_path = [str(_EXTRA)]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "sphinx_book_theme"
html_title = "alignmt"
html_static_path: list[str] = []
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}
html_last_updated_fmt = None
