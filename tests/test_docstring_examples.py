"""The examples in the docstrings of the public entry points run as written (the API reference shows them)."""

import inspect
import re

import pytest

import jaxicl as icl

ENTRY_POINTS = {
    "population_loss": icl.population_loss,
    "mc_loss": icl.mc_loss,
    "gradient_flow": icl.gradient_flow,
    "train": icl.train,
    "sweep": icl.sweep,
    "LinearSelfAttention": icl.models.LinearSelfAttention,
    "LinearRegression": icl.tasks.LinearRegression,
    "MultiHeadSoftmaxICL": icl.models.MultiHeadSoftmaxICL,
    "LinearTransformer": icl.models.LinearTransformer,
    "TemplateRegression": icl.tasks.TemplateRegression,
    "AlgoFormer": icl.models.AlgoFormer,
    "StandardTransformer": icl.models.StandardTransformer,
    "LoopedTransformer": icl.models.LoopedTransformer,
    "RepresentationRegression": icl.tasks.RepresentationRegression,
    "ARRepresentation": icl.tasks.ARRepresentation,
    "CoTMLP": icl.tasks.CoTMLP,
    "FixedGramRegression": icl.tasks.FixedGramRegression,
    "WindowedScale": icl.tasks.WindowedScale,
    "RandomDiagonalCovariance": icl.tasks.RandomDiagonalCovariance,
    "sequence_loss": icl.losses.sequence_loss,
    "fixed_gram_population_loss": icl.losses.fixed_gram_population_loss,
    "template_loss": icl.losses.template_loss,
}


def _examples(obj) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    section = doc.split("Example:", 1)[1] if "Example:" in doc else ""
    return [inspect.cleandoc(block) for block in re.findall(r"```python\n(.*?)```", section, re.S)]


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_the_docstring_example_runs(name):
    blocks = _examples(ENTRY_POINTS[name])
    assert blocks, f"{name}'s docstring has no example"
    for block in blocks:
        exec(compile(block, f"<{name} docstring>", "exec"), {})
