"""Write benchmarks/README.md's result tables from ``benchmarks/results/`` (``python benchmarks/render.py``; ``make
bench`` runs it after the benchmarks): between ``<!-- results: BENCH -->`` and ``<!-- /results -->``, one table of the
latest result of each machine and variant for that benchmark, machines side by side (a column says which)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results"
MARK = re.compile(r"(<!-- results: (\S+) -->\n)(.*?)(<!-- /results -->)", re.S)


def latest(bench: str, results: Path = RESULTS) -> list[dict]:
    """The newest result of each machine and variant for ``bench`` (by its time of measurement), in alphabetical
    order of machine, then variant."""

    def when(result):
        return result.get("time") or result["date"]

    newest: dict[tuple[str, str], dict] = {}
    for path in sorted((results / bench).glob("*.json")):
        result = json.loads(path.read_text())
        which = result["machine"], result.get("variant", "")
        if which not in newest or when(result) >= when(newest[which]):
            newest[which] = result
    return [newest[w] for w in sorted(newest)]


def script(bench: str) -> str:
    """The script that records ``bench``: the benchmark's name, or the longest script name it begins with
    (bench_ahn.py records bench_ahn_loss_grad)."""
    names = [p.name for p in HERE.glob("bench_*.py") if bench == p.stem or bench.startswith(p.stem + "_")]
    return max(names, key=len, default=f"{bench}.py")


def _number(value: float) -> str:
    """Three significant digits, without an exponent from 1,000 up (1,107 rather than 1.11e+03)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _cell(value) -> str:
    text = _number(value) if isinstance(value, float) else str(value)
    return text.replace("|", "\\|")  # a table cell cannot hold a bare |


def table(bench: str, results: Path = RESULTS) -> str:
    """A markdown table: one line per row of each machine's latest result, with the machine, its backend, date and
    commit (and the variant, where a result names one); the rows' own columns in the order they first appear."""
    found = latest(bench, results)
    if not found:
        return f"(no result recorded yet: run `python benchmarks/{script(bench)}`)\n"
    columns = list(dict.fromkeys(k for r in found for row in r["rows"] for k in row))
    where = ["machine", "backend", "date", "commit"] + (["variant"] if any(r.get("variant") for r in found) else [])
    head = [_cell(c) for c in (*where, *columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        for row in r["rows"]:
            cells = [_cell(r.get(w, "")) for w in where] + [_cell(row.get(c, "")) for c in columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(text: str, results: Path = RESULTS) -> str:
    """``text`` with every marked table rewritten from ``results``."""
    return MARK.sub(lambda m: m[1] + table(m[2], results) + m[4], text)


def main(readme: Path = HERE / "README.md") -> None:
    readme.write_text(render(readme.read_text()))
    print(f"[render] {readme}")


if __name__ == "__main__":
    main(*(Path(a) for a in sys.argv[1:]))
