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
from .transformer import AlgoFormer, Block, BlockStack, LoopedTransformer, StandardTransformer, n_params

__all__ = [
    "AlgoFormer",
    "Block",
    "BlockStack",
    "LoopedTransformer",
    "StandardTransformer",
    "n_params",
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
