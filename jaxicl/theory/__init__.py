"""Closed-form predictions and weight constructions, one module per paper."""

from . import zhang

__all__ = ["zhang"]
