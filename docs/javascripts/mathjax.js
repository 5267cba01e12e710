// MathJax for the spans pymdownx.arithmatex writes ($…$ inline, $$…$$ displayed), loaded from the site itself
// (assets/mathjax/tex-svg.js, copied there by mkdocs_hooks.py): no network needed to read the equations.
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex"},
  svg: {fontCache: "global"},
};
