"""Equinox modules for the models of the papers."""

from .linear_transformer import (
    BlockWeights,
    FullWeights,
    GramBatch,
    LinearTransformer,
    Parametrization,
    PreconditionerWeights,
    RestrictedWeights,
    SingleLayerWeights,
)
from .lsa import LinearSelfAttention
from .softmax_attention import MultiHeadSoftmaxICL

__all__ = [
    "BlockWeights",
    "FullWeights",
    "GramBatch",
    "LinearSelfAttention",
    "LinearTransformer",
    "MultiHeadSoftmaxICL",
    "Parametrization",
    "PreconditionerWeights",
    "RestrictedWeights",
    "SingleLayerWeights",
]
