"""Prompt distributions: covariance priors and in-context regression tasks."""

from .covariance import (
    CovariancePrior,
    FixedCovariance,
    RandomDiagonalCovariance,
    RandomRotationCovariance,
    check_covariance,
    check_orthogonal,
    rotated_covariance,
    gauss_rule_two_nodes,
    DiscreteScale,
    RandomSpectrumCovariance,
    ScalePrior,
    ScaledIdentityCovariance,
    UniformScale,
    WindowedScale,
    gauss_legendre,
)
from .linear_regression import FixedGramRegression, LinearRegression, Prompt, embed
from .template_regression import TemplatePrompt, TemplateRegression, check_dictionary, random_dictionary

__all__ = [
    "CovariancePrior",
    "FixedCovariance",
    "RandomDiagonalCovariance",
    "RandomRotationCovariance",
    "check_covariance",
    "check_orthogonal",
    "rotated_covariance",
    "gauss_rule_two_nodes",
    "DiscreteScale",
    "RandomSpectrumCovariance",
    "ScalePrior",
    "ScaledIdentityCovariance",
    "UniformScale",
    "WindowedScale",
    "gauss_legendre",
    "FixedGramRegression",
    "LinearRegression",
    "Prompt",
    "embed",
    "TemplatePrompt",
    "TemplateRegression",
    "check_dictionary",
    "random_dictionary",
]
