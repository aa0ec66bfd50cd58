"""The one parser of settings: typed readers of environment variables and strict
namespaces, and `setting()`, the one declaration of a settings dataclass's field."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar, overload

from .errors import ConfigurationError, ValidationError
from .validation import is_finite_number, is_int, validate_name

__all__ = [
    "FALSE_WORDS",
    "LATENCY_BUCKETS_VARIABLE",
    "QUEUE_PREFIX_VARIABLE",
    "TRUE_WORDS",
    "Setting",
    "check_int",
    "check_latency_buckets",
    "check_positive",
    "parse_bool",
    "parse_choice",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_latency_buckets",
    "parse_list",
    "parse_name",
    "parse_text",
    "read_namespace",
    "read_variable",
    "setting",
    "settings_of",
    "written",
]

T = TypeVar("T")

# The queue's key prefix and latency buckets are read by the queue (QueueSettings) and
# by the exporter (ExporterSettings) from these variables, with the same checks, so a
# deployment declares each once and the two processes cannot disagree.
QUEUE_PREFIX_VARIABLE = "QUEUE_PREFIX"
LATENCY_BUCKETS_VARIABLE = "QUEUE_LATENCY_BUCKETS"

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

# No setting needs 19 digits; the cap also keeps int() clear of its 4300-digit refusal.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
# Longest suffix first, so "500ms" is read as milliseconds, not as "500m" + "s".
_DURATION_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
# Kubernetes injects <SERVICE>_SERVICE_HOST, <SERVICE>_PORT=tcp://ip:port and friends
# for every Service of the namespace (a Service named "queue-exporter" gives
# QUEUE_EXPORTER_*). They are not settings, so a strict namespace must let them pass.
_SERVICE_LINK = re.compile(
    r"[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?"
    r"|PORT_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)"
)
_SERVICE_LINK_VALUE = re.compile(r"(tcp|udp|sctp)://", re.IGNORECASE)


# --- declaring a setting -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """How one field of a settings dataclass is given as text, and what it means.

    Declared once, on the field (`setting()`): reading the environment, a command's
    --help and the docs' settings table are all derived from it and the field's default."""

    parse: Callable[[str, str], Any]
    """(raw text, the variable or flag it came from) -> the field's value. Range checks
    belong to the dataclass, which also sees keyword arguments."""
    help: str
    variable: str | None = None
    """Its environment variable, where the class does not derive it from the name."""
    flag: str | None = None
    """Its command-line flag, for a class read from a command line too."""
    deprecated_variable: str | None = None
    """A former name of `variable`, still read when `variable` is not set."""


_SETTING = "platform_common.jobs.env.Setting"  # the metadata key of a field's Setting


def setting(
    default: T,
    parse: Callable[[str, str], Any],
    help: str,
    *,
    variable: str | None = None,
    flag: str | None = None,
    deprecated_variable: str | None = None,
) -> T:
    """A dataclass field with `default`, declared with how it is set (see Setting)."""
    declared = Setting(parse, help, variable, flag, deprecated_variable)
    return dataclasses.field(default=default, metadata={_SETTING: declared})


def settings_of(cls: type) -> dict[str, Setting]:
    """Field name -> Setting of every field of dataclass `cls` declared with `setting()`,
    in field order."""
    return {
        field.name: field.metadata[_SETTING]
        for field in dataclasses.fields(cls)
        if _SETTING in field.metadata
    }


def written(value: object) -> str:
    """`value` as a variable would be written to give it: `1`, not `1.0`; lists
    comma-separated; "" for nothing."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(written(item) for item in value)
    return str(value)


# --- guards on typed values (dataclass fields, keyword arguments) ---------------------


def check_int(setting: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ConfigurationError(setting, f"must be an int {bounds}, got {value!r}")
    return value


def check_positive(setting: str, value: object, *, maximum: float | None = None) -> float:
    if not is_finite_number(value) or value <= 0:
        raise ConfigurationError(setting, f"must be a positive number, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(setting, f"must be at most {maximum:g}, got {value!r}")
    return float(value)


def check_latency_buckets(setting: str, bounds: object) -> tuple[float, ...]:
    """Histogram upper bounds: at least one, finite, positive, strictly ascending."""
    if (
        not isinstance(bounds, tuple | list)
        or not bounds
        or not all(is_finite_number(bound) and bound > 0 for bound in bounds)
    ):
        raise ConfigurationError(setting, f"must be finite positive numbers, got {bounds!r}")
    if list(bounds) != sorted(set(bounds)):
        raise ConfigurationError(setting, f"must be strictly ascending, got {bounds!r}")
    return tuple(float(bound) for bound in bounds)


# --- parsers of one raw string; `setting` names the variable (or flag) in errors ------


def parse_text(raw: str, setting: str) -> str:
    text = raw.strip()
    if not text:
        raise ConfigurationError(setting, "must not be empty")
    return text


def parse_bool(raw: str, setting: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigurationError(setting, f"must be true/false (1/0, yes/no, on/off), got {raw!r}")


def parse_int(
    raw: str, setting: str, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    text = raw.strip()
    # A regex, not int() alone: int() also takes "1_000" and non-ASCII digits.
    if not _INTEGER.fullmatch(text):
        raise ConfigurationError(setting, f"must be an integer, got {raw!r}")
    number = int(text)
    _check_bounds(number, setting, minimum, maximum)
    return number


def parse_float(
    raw: str, setting: str, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    try:
        number = float(raw)
    except ValueError:
        raise ConfigurationError(setting, f"must be a number, got {raw!r}") from None
    if not math.isfinite(number):
        raise ConfigurationError(setting, f"must be a finite number, got {raw!r}")
    _check_bounds(number, setting, minimum, maximum)
    return number


def parse_duration(raw: str, setting: str, *, maximum: float | None = None) -> float:
    """Positive seconds: "30", "1.5", or with a unit: "500ms", "30s", "2m", "1h"."""
    text = raw.strip().lower()
    scale = 1.0
    for unit, seconds in _DURATION_UNITS:
        if text.endswith(unit):
            text, scale = text[: -len(unit)].rstrip(), seconds
            break
    try:
        number = float(text) * scale
    except ValueError:
        raise ConfigurationError(
            setting, f"must be a duration in seconds (e.g. 30, 1.5, 500ms, 2m), got {raw!r}"
        ) from None
    if not math.isfinite(number) or number <= 0:
        raise ConfigurationError(setting, f"must be a positive duration, got {raw!r}")
    if maximum is not None and number > maximum:
        raise ConfigurationError(setting, f"must be at most {maximum} s, got {raw!r}")
    return number


@overload
def parse_list(raw: str, setting: str) -> tuple[str, ...]: ...
@overload
def parse_list(raw: str, setting: str, parse_item: Callable[[str, str], T]) -> tuple[T, ...]: ...
def parse_list(
    raw: str, setting: str, parse_item: Callable[[str, str], object] | None = None
) -> tuple[object, ...]:
    """Comma-separated items, each stripped; empty items are skipped ("a, b," is a, b)."""
    items = tuple(part.strip() for part in raw.split(",") if part.strip())
    if parse_item is None:
        return items
    return tuple(parse_item(item, setting) for item in items)


def parse_choice(raw: str, setting: str, choices: Iterable[str]) -> str:
    """One of `choices` (lower-case), compared case-insensitively."""
    options = tuple(choices)
    word = raw.strip().lower()
    if word not in options:
        raise ConfigurationError(setting, f"must be one of {', '.join(options)}, got {raw!r}")
    return word


def parse_name(raw: str, setting: str) -> str:
    """An agent type or key prefix, by the package's one naming rule (validate_name)."""
    try:
        return validate_name(raw.strip(), setting)
    except ValidationError as exc:
        raise ConfigurationError(setting, exc.problem) from None


def parse_latency_buckets(raw: str, setting: str) -> tuple[float, ...]:
    """Comma-separated upper bounds in seconds, strictly ascending."""
    return check_latency_buckets(setting, parse_list(raw, setting, parse_duration))


def _check_bounds(
    number: float, setting: str, minimum: float | None, maximum: float | None
) -> None:
    if minimum is not None and number < minimum:
        raise ConfigurationError(setting, f"must be >= {minimum}, got {number!r}")
    if maximum is not None and number > maximum:
        raise ConfigurationError(setting, f"must be <= {maximum}, got {number!r}")


# --- reading the environment --------------------------------------------------------


def read_variable(environ: Mapping[str, str], name: str) -> str | None:
    """The variable's value; None when unset or blank (blank means "use the default")."""
    value = environ.get(name)
    return value if value is not None and value.strip() else None


def read_namespace(
    environ: Mapping[str, str], prefix: str, known: Collection[str]
) -> dict[str, str]:
    """The set (non-blank) variables of the namespace `prefix`, by full name.

    Any other variable that starts with `prefix` is a ConfigurationError naming it and
    the closest known name: a typo must fail at start, not silently leave a default.
    Only for namespaces this package owns; Kubernetes service links are let through."""
    values: dict[str, str] = {}
    for name, raw in environ.items():
        if not name.startswith(prefix):
            continue
        if name not in known:
            if _is_service_link(name, raw):
                continue
            raise ConfigurationError(name, _unknown(name, prefix, known))
        if raw.strip():
            values[name] = raw
    return values


def _unknown(name: str, prefix: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f"unknown {prefix}* variable; did you mean {close[0]}?"
    return f"unknown {prefix}* variable; known: {', '.join(sorted(known))}"


def _is_service_link(name: str, raw: str) -> bool:
    if _SERVICE_LINK.fullmatch(name):
        return True
    return name.endswith("_PORT") and _SERVICE_LINK_VALUE.match(raw.strip()) is not None
