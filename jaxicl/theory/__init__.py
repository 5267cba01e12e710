"""Closed-form predictions and weight constructions, one module per paper."""

from . import ahn, gatmiry, zhang

__all__ = ["ahn", "gatmiry", "zhang"]
