"""Equinox modules for the models of the papers."""

from .lsa import LinearSelfAttention

__all__ = ["LinearSelfAttention"]
