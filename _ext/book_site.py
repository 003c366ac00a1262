"""The book's Sphinx extension: what the site needs beyond Jupyter Book's defaults.

- Key equations are numbered as in the text: the display labelled ``eq-19-1`` shows (19.1), and
  every ``{eq}`` reference to it says (19.1). Other labelled displays keep their number within
  their page.
- Nothing a page needs comes from another host: MathJax ships with the site (the extension
  ``sphinx-mathjax-offline``); the widget manager is not loaded from a CDN, and a saved widget
  is replaced by a note (the static small multiples beside it show the same); the icon font that
  matplotlib's animation HTML asks a CDN for is dropped (the theme's icons render the buttons).
- Thebe (live code on the page) is not used: its configuration script, which Jupyter Book emits
  twice (a JavaScript error on every page), is removed.
"""

from __future__ import annotations

import re

from docutils import nodes

KEY_LABEL = re.compile(r"^eq-(\d+|[A-Ca-c])-(\d+)$")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CDN_LINK = re.compile(r"<link[^>]+href=\"https?://[^\"]+\"[^>]*>", re.I)
WIDGET_NOTE = (
    "An interactive widget runs here when the notebook is open in Jupyter or Colab; the static "
    "figure beside it shows the same idea on this page."
)


def key_number(label: str | None) -> str | None:
    """``eq-19-1`` -> ``19.1`` (appendix labels: ``eq-a-2`` -> ``A.2``); None for other labels."""
    m = KEY_LABEL.match(label or "")
    return f"{m.group(1).upper()}.{m.group(2)}" if m else None


def number_key_equations(app, env) -> None:
    """After reading: the math domain records (docname, "N.k") for every key equation."""
    equations = env.get_domain("math").data.setdefault("objects", {})
    for label, (docname, _) in list(equations.items()):
        shown = key_number(label)
        if shown:
            equations[label] = (docname, shown)


def site_doctree(app, doctree, docname) -> None:
    """Before writing a page: key equation numbers, widget notes, no CDN links in raw HTML."""
    for node in doctree.findall(nodes.math_block):
        shown = key_number(node.get("label"))
        if shown:
            node["number"] = shown
    for node in list(doctree.findall(nodes.raw)):
        text = node.astext()
        if WIDGET_VIEW in text:
            note = nodes.note("", nodes.paragraph(text=WIDGET_NOTE))
            node.replace_self(note)
        elif CDN_LINK.search(text):
            node.replace_self(nodes.raw("", CDN_LINK.sub("", text), format=node.get("format")))


def _unused(js) -> bool:
    """Thebe's scripts and the saved widget state (no widget manager reads it on the site)."""
    attrs = getattr(js, "attributes", {})
    return (
        "thebe" in str(js)
        or "THEBE" in attrs.get("body", "")
        or attrs.get("type") == "application/vnd.jupyter.widget-state+json"
    )


def drop_unused_scripts(app, pagename, templatename, context, doctree) -> None:
    """Remove the scripts the site does not use from the page."""
    context["script_files"] = [js for js in context.get("script_files", []) if not _unused(js)]


def setup(app):
    app.connect("env-updated", number_key_equations)
    app.connect("doctree-resolved", site_doctree)
    app.connect("html-page-context", drop_unused_scripts, priority=900)  # after myst-nb's
    app.add_css_file("book.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
