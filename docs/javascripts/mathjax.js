// MathJax, loaded from the site itself (assets/mathjax/tex-svg.js, copied there by mkdocs_hooks.py): no network
// needed to read the equations. It typesets the spans pymdownx.arithmatex writes ($…$ inline, $$…$$ displayed) and the
// notebooks' Markdown cells (mkdocs-jupyter keeps their $…$ as written); the rest of the page content (md-typeset)
// is left alone, so a dollar sign in prose stays one.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {ignoreHtmlClass: "md-typeset", processHtmlClass: "arithmatex|jp-RenderedMarkdown"},
  svg: {fontCache: "global"},
};
