"""Closed-form predictions and weight constructions, one module per paper."""

from . import ahn, gatmiry, yang, zhang

__all__ = ["ahn", "gatmiry", "yang", "zhang"]
