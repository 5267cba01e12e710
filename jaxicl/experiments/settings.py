"""A reproduction's settings, changed from the command line or a file: ``jaxicl reproduce NAME --set kappas=[2,16,64]
--config FILE.toml``, and ``jaxicl config NAME`` to print them.

Every paper's module has a frozen ``Config`` dataclass and ``SIZES = {"quick": Config(...), "trained": Config(...),
"full": Config(...)}`` (`SIZE_NAMES`).
An override names a field (``d``, ``kappas``; a nested config's field with a dot: ``gpt2.steps``) and gives a TOML
value (``20``, ``[2, 16, 64]``, ``"bfloat16"``). It is checked before any work, against the type of the field's value
at that size:

- an unknown key is an error listing the allowed keys and the closest one;
- integers must be integral (``2.5`` is not 2), ≥ 1 (``seed``, a curriculum's interval and ``fig5_steps`` ≥ 0);
  reals finite and ≥ 0; a field named after κ ≥ 1;
- a tuple's entries follow the same rules; a boolean is ``true``/``false``; a text field takes text;
- settings that contradict each other are refused (`Consistent.contradictions`), and so is a change to a setting that
  the run never reads, naming the switch that would read it (`refuse_unread`: ``gpt2.steps`` while Fig. 1 is off).

The effective settings, and those that differ from the paper's size, are recorded in the report
(`PaperResult.settings <jaxicl.experiments.report.PaperResult>`); training checkpoints refuse to resume under
changed settings that would make them wrong (their ``config`` fingerprint names the changed key).
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import tomllib
from typing import Any

from .. import _validate


class Consistent:
    """Base of a settings dataclass whose fields can contradict each other (`contradictions`): such a one is refused
    when it is made."""

    def __post_init__(self):
        problems = self.contradictions()
        if problems:
            raise SettingsError("settings that contradict each other: " + "; ".join(problems) + ".")

    def contradictions(self) -> list[str]:
        """The settings of this Config that contradict each other, each with its reason: a Config that has any is
        refused when it is made (``--set``, ``--config``, ``dataclasses.replace``), before any work."""
        return []

    def unread(self) -> dict[str, str]:
        """The settings that a reproduction at these settings never reads (a field's name; a nested config's name for
        all its fields) -> why, naming the setting that would read them: `refuse_unread` refuses a change to one."""
        return {}

    def largest_arrays(self) -> dict[str, int]:
        """The largest arrays a run with these settings builds, from their shapes: what -> bytes (several arrays of
        one kind counted together). An estimate of what the run holds at once, from below: `apply` refuses settings
        whose largest array does not fit in half of this machine's memory, before anything is built."""
        return {}


# A reproduction's sizes, smallest first: `quick`, minutes on a 2-core CPU, where a claim about trained models that
# needs a longer training is shown with its margin, not asserted; `trained`, the smallest training at which each
# trained claim held for three seeds when it was measured (``jaxicl sweep --stage`` over the steps and the seed),
# where those claims are asserted over three seeds computed in the run; `full`, the papers' own sizes.
SIZE_NAMES = ("quick", "trained", "full")


class Sized(Consistent):
    """Base of a paper's ``Config``: ``Config.quick()``, ``Config.trained()`` and ``Config.full()`` are its module's
    ``SIZES`` (`SIZE_NAMES`); change any setting with ``dataclasses.replace``."""

    @classmethod
    def quick(cls):
        return sys.modules[cls.__module__].SIZES["quick"]

    @classmethod
    def trained(cls):
        return sys.modules[cls.__module__].SIZES["trained"]

    @classmethod
    def full(cls):
        return sys.modules[cls.__module__].SIZES["full"]


def trains_as_long(at: str, **training: tuple[int, int]) -> tuple[bool, str]:
    """Whether a run trains at least as much as the size ``at`` in every respect, and, for the rows asserted only
    from there, the reason they are not asserted at this run's size.

    ``training``: what -> (this run's value, ``at``'s value); ``what`` is read with underscores as spaces
    (``training_steps=(3000, 8000), seeds=(1, 3)`` gives ``(False, "3,000 training steps, 1 seed (--trained: 8,000,
    3)")``)."""
    if at not in SIZE_NAMES:
        raise ValueError(f"size must be one of {SIZE_NAMES}, got {at!r}.")
    enough = all(mine >= theirs for mine, theirs in training.values())
    names = {what: what.replace("_", " ") for what in training}
    mine = ", ".join(
        f"{v:,} {names[what].removesuffix('s') if v == 1 else names[what]}" for what, (v, _) in training.items()
    )
    theirs = ", ".join(f"{v:,}" for _, v in training.values())
    return enough, f"{mine} (--{at}: {theirs})"


# text settings with a fixed set of values
CHOICES = {"compute_dtype": ("bfloat16", "float32")}
# integers are at most this (steps and sizes live in int32 arrays)
MAX_INT = 2**31 - 1

# integer settings that may be 0 (a seed; a curriculum's interval, 0 for none; the AlgoFormer's Fig. 3 and Fig. 5 steps,
# 0 for its `steps`); every other integer is >= 1
ZERO_ALLOWED = ("seed", "curriculum_every", "fig3_steps", "fig5_steps", "fig5_curriculum_every")


class SettingsError(ValueError):
    """An override that cannot be applied: the message names the key, the value and what is allowed."""


def flat(cfg) -> dict[str, Any]:
    """Every field of a config as ``name`` (``parent.name`` in a nested config) -> value."""
    out = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out.update({f"{f.name}.{k}": v for k, v in flat(value).items()})
        else:
            out[f.name] = value
    return out


def field_docs(cfg) -> tuple[dict[str, str], dict[str, str]]:
    """(docs, headings): what each setting of ``cfg`` means, read from its class's source: a field's trailing comment,
    and the comment that heads its group (``# Fig. 3: the gap against N``; all its lines, joined by newlines), if any;
    nested configs' dotted."""
    import inspect
    import re

    docs: dict[str, str] = {}
    headings: dict[str, str] = {}
    try:
        source = inspect.getsource(type(cfg))
    except (OSError, TypeError):
        return docs, headings
    section, in_comment = "", False
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):  # a comment of several lines is one heading, its lines kept
            text = stripped.lstrip("# ").rstrip()
            section, in_comment = (f"{section}\n{text}" if in_comment else text), True
            continue
        in_comment = False
        match = re.match(r"(\w+)\s*:[^#]*?(?:#\s*(.*))?$", stripped)
        if not match or not hasattr(cfg, match.group(1)):
            if not stripped:
                section = ""
            continue
        if match.group(2):
            docs[match.group(1)] = match.group(2)
        if section:
            headings[match.group(1)] = section
        if dataclasses.is_dataclass(getattr(cfg, match.group(1))):  # its heading is its table's, not the next field's
            section = ""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            sub_docs, sub_headings = field_docs(value)
            docs.update({f"{f.name}.{k}": v for k, v in sub_docs.items()})
            headings.update({f"{f.name}.{k}": v for k, v in sub_headings.items()})
    return docs, headings


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"key=value"`` -> (key, value), the value read as TOML (a bare word is text: ``compute_dtype=bfloat16``)."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:
        raise SettingsError(f"--set takes KEY=VALUE (a TOML value, e.g. kappas=[2,16,64]), got {text!r}.")
    try:
        return key, tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        if raw and all(c.isalnum() or c in "_-." for c in raw):
            return key, raw
        raise SettingsError(
            f'--set {key}: {raw!r} is not a TOML value (numbers, true/false, "text", [lists]).'
        ) from None


def read_file(path) -> dict[str, Any]:
    """A settings file: top-level keys, and tables for nested configs (``[gpt2]``), as dotted keys."""
    from .._io import read_toml

    try:
        raw = read_toml(path, "settings file")
    except ValueError as e:
        raise SettingsError(str(e)) from None

    def walk(table, prefix=""):
        for k, v in table.items():
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    return dict(walk(raw))


def _entry(key: str, value, like):
    """``value`` checked against the field's current value ``like`` (its type and the sign rules)."""
    if isinstance(like, bool):
        if not isinstance(value, bool):
            raise SettingsError(f"{key} must be true or false, got {value!r}.")
        return value
    try:  # numbers: the library's own checks (integrality, finiteness, bounds), their errors naming the key
        if isinstance(like, int):
            return _validate.integer(
                key, value, low=0 if key.split(".")[-1].split("[")[0] in ZERO_ALLOWED else 1, high=MAX_INT
            )
        if isinstance(like, float):
            kappa = "kappa" in key.lower()
            return float(
                _validate.real(key, value, ge=1.0 if kappa else 0.0, why=" (a condition number)" if kappa else "")
            )
    except (TypeError, ValueError) as e:
        raise SettingsError(str(e)) from None
    if isinstance(like, str) or like is None:
        if not isinstance(value, str):
            raise SettingsError(f"{key} must be text, got {value!r}.")
        choices = CHOICES.get(key.split(".")[-1])
        if choices is not None and value not in choices:
            raise SettingsError(f"{key} must be one of {', '.join(choices)}, got {value!r}.")
        return value
    raise SettingsError(f"{key} cannot be set from the command line.")


def _value(key: str, value, like):
    if isinstance(like, tuple):
        if not isinstance(value, list):
            raise SettingsError(f"{key} must be a list, e.g. {list(like)}, got {value!r}.")
        if not value:
            raise SettingsError(f"{key} must not be empty.")
        kinds = {type(v) for v in like}
        sample = 0.0 if float in kinds or not like else like[0]  # a tuple of tuples: its entries' first, e.g. (8, 6)
        return tuple(_value(f"{key}[{i}]", v, sample) for i, v in enumerate(value))
    return _entry(key, value, like)


def apply(cfg, overrides: dict[str, Any]):
    """``cfg`` with ``overrides`` (dotted keys -> values) applied and checked (`SettingsError` naming the key)."""
    fields = flat(cfg)
    nested = {f.name for f in dataclasses.fields(cfg)}
    changes: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if key not in fields:
            from . import available

            parent, dotted, rest = key.partition(".")
            if dotted and parent in nested and getattr(cfg, parent) is None:
                raise SettingsError(f"{key}: {parent} is off in this run (--skip-transformers?).")
            if dotted and parent in available():  # `[zhang2023]` in a file, or --set zhang2023.d=3
                raise SettingsError(
                    f"unknown setting {key!r}: a paper's settings are named without the paper ({rest!r}), as "
                    f"`jaxicl config {parent}` prints them."
                )
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise SettingsError(f"unknown setting {key!r}.{hint} Allowed: {', '.join(fields)}.")
        changes.setdefault(key.split(".")[0] if "." in key else "", {})[key.split(".")[-1]] = _value(
            key, value, fields[key]
        )
    top = changes.pop("", {})
    for parent, sub in changes.items():
        top[parent] = dataclasses.replace(getattr(cfg, parent), **sub)
    new = dataclasses.replace(cfg, **top)
    check_memory(new)
    return new


def transformer_arrays(
    what: str, batch: int, tokens: int, d_model: int, layers: int, d_ff: int, passes: int = 1
) -> dict[str, int]:
    """The largest arrays of training a pre-LN transformer (float32): its parameters with their gradient and Adam's
    two moments, and the activations kept for the backward pass (``passes``: its blocks applied that many times per
    step, e.g. a looped model's loops; the attention scores left out, which a fused attention does not keep)."""
    params = layers * (4 * d_model**2 + 2 * d_model * d_ff)
    acts = passes * layers * batch * tokens * (6 * d_model + 2 * d_ff)
    return {
        f"{what}: parameters, gradients and Adam's moments": 4 * 4 * params,
        f"{what}: activations kept for the backward pass": 4 * acts,
    }


def check_memory(cfg) -> None:
    """A `SettingsError` if one of the largest arrays of ``cfg`` and its nested configs (`Consistent.largest_arrays`)
    needs more than half of this machine's memory."""
    from ..sweep import host_memory_bytes

    arrays = {}
    for c in (cfg, *(getattr(cfg, f.name) for f in dataclasses.fields(cfg))):
        if isinstance(c, Consistent):
            arrays.update(c.largest_arrays())
    limit = host_memory_bytes() // 2
    too_big = {what: n for what, n in arrays.items() if n > limit}
    if too_big:
        what, n = max(too_big.items(), key=lambda kv: kv[1])
        raise SettingsError(
            f"these settings need more memory than this machine has: {what} alone take "
            f"{n / 2**30:.3g} GiB, more than half of its {2 * limit / 2**30:.3g} GiB. Use smaller "
            "sizes (`jaxicl config NAME` shows each setting)."
        )


def differences(cfg, reference) -> dict[str, tuple[Any, Any]]:
    """The settings in which ``cfg`` differs from ``reference`` (the paper's size): key -> (value, reference value)."""
    a, b = flat(cfg), flat(reference) if reference is not None else {}
    return {k: (v, b.get(k)) for k, v in a.items() if b.get(k) != v}


def refuse_unread(cfg, reference) -> None:
    """A SettingsError naming each setting in which ``cfg`` (a reproduction's settings, overrides applied) differs from
    ``reference`` (those before them) and that a reproduction at ``cfg`` never reads (`Consistent.unread`): such a
    change would be recorded in the report as one of its settings while no number depends on it."""
    unread = cfg.unread() if isinstance(cfg, Consistent) else {}
    ignored = [(k, unread.get(k, unread.get(k.split(".")[0]))) for k in differences(cfg, reference)]
    ignored = [f"{k} ({why})" for k, why in ignored if why]
    if ignored:
        raise SettingsError(f"changed settings that this run never reads: {'; '.join(ignored)}.")


def toml_value(value) -> str:
    """``value`` written as a TOML value (what `parse_assignment` reads back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_toml(
    cfg,
    sizes: dict,
    size: str,
    docs: dict[str, str] | None = None,
    title: str = "",
    headings: dict[str, str] | None = None,
) -> str:
    """``cfg`` as a TOML settings file to start from (``--config``): every field, with its meaning where ``docs`` has
    it and its value at the other sizes where it differs, under its group's heading (``headings``). A field that is
    off (None) is left out."""
    docs, headings = docs or {}, headings or {}
    shown = [None]
    others = {name: flat(c) for name, c in sizes.items() if name != size}
    values = {k: v for k, v in flat(cfg).items() if v is not None}

    def line(key, name):
        note = [docs[key]] if key in docs else []
        note += [
            f"{other}: {toml_value(vals.get(key))}" for other, vals in others.items() if vals.get(key) != values[key]
        ]
        text = f"{name} = {toml_value(values[key])}" + (f"  # {'; '.join(note)}" if note else "")
        heading, shown[0] = (headings.get(key) if headings.get(key) != shown[0] else None), headings.get(key)
        return "".join(f"# {part}\n" for part in heading.split("\n")) + text if heading else text

    lines = [
        f"# {title}" if title else "# settings",
        f"# size: {size}. Change any value and pass this file with --config FILE, or one value with --set KEY=VALUE.",
        "",
    ]
    lines += [line(k, k) for k in values if "." not in k]
    for table in dict.fromkeys(k.split(".")[0] for k in values if "." in k):
        lines += ["", f"[{table}]"] + [line(k, k.split(".", 1)[1]) for k in values if k.startswith(f"{table}.")]
    return "\n".join(lines) + "\n"
