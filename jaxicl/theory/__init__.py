"""Closed-form predictions and weight constructions, one module per paper."""

from . import ahn, zhang

__all__ = ["ahn", "zhang"]
