"""Site settings from YAML: `site.defaults.yaml` overlaid by a site's file, checked key by key.

A site tunes its alerts without touching Python: every `MonitoringConfig` field except
the test-only `for_override` is a top-level key. A key the config does not know, a
value of the wrong type, a key given twice or a bad value is a `ConfigurationError`
naming the key and the file it came from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml

from platform_common.jobs.errors import ConfigurationError

from .config import MonitoringConfig
from .slo import Objective, SloKind, SloOverride
from .spec import alert_specs

__all__ = ["DEFAULTS_FILE", "SITE_SETTINGS", "load_config"]

# Resolved: an editable install links files one by one, and the source folder is the truth.
DEFAULTS_FILE = Path(__file__).resolve().with_name("site.defaults.yaml")
"""The committed defaults, shipped as package data beside this module."""

_TYPES: dict[str, Any] = get_type_hints(MonitoringConfig)
SITE_SETTINGS = tuple(f.name for f in fields(MonitoringConfig) if f.name != "for_override")
"""Every key a site file may set (and the defaults file must set)."""

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number"}
_OBJECTIVE_KINDS: dict[str, SloKind] = {
    "slo_availability": "availability",
    "slo_latency": "latency",
}


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML would keep the last silently)."""


def _unique_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ConfigurationError(str(key), f"given twice ({key_node.start_mark.name}:{line})")
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open(encoding="utf-8") as stream:
            document = yaml.load(stream, Loader=_StrictLoader)
    except OSError as exc:
        raise ConfigurationError(str(path), f"cannot read the site file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(str(path), f"not valid YAML: {exc}") from exc
    if document is None:  # an empty file changes nothing
        return {}
    if not isinstance(document, dict):
        raise ConfigurationError(str(path), "must be a mapping of setting: value")
    return document


def _typed(key: str, value: Any, expected: Any, origin: Path) -> Any:
    """`value` as the config field's type (ints widen to float), or an error naming `key`."""
    if expected is Objective:
        return Objective.from_yaml(key, value, _OBJECTIVE_KINDS[key], str(origin))
    if expected is SloOverride:
        return SloOverride.from_yaml(key, value, str(origin))
    if get_origin(expected) is tuple:
        if not isinstance(value, list):
            raise ConfigurationError(key, f"must be a list ({origin})")
        item_type = get_args(expected)[0]
        return tuple(
            _typed(f"{key}[{index}]", item, item_type, origin) for index, item in enumerate(value)
        )
    if get_origin(expected) is Mapping:
        _, item_type = get_args(expected)
        if not isinstance(value, dict):
            what = "number" if item_type is float else "its changes"
            raise ConfigurationError(key, f"must be a mapping of agent type: {what} ({origin})")
        typed = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise ConfigurationError(key, f"agent type {name!r} must be a string ({origin})")
            typed[name] = _typed(f"{key}[{name}]", item, item_type, origin)
        return typed
    # YAML's true/false are ints to Python: never a threshold.
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if expected is float and number:
        return float(value)
    if (expected is int and number and isinstance(value, int)) or (
        expected is str and isinstance(value, str)
    ):
        return value
    found = f"{type(value).__name__} {value!r}"
    raise ConfigurationError(key, f"must be {_TYPE_NAMES[expected]}, got {found} ({origin})")


def _check_keys(document: Mapping[str, Any], origin: Path) -> None:
    for key in document:
        if key not in SITE_SETTINGS:
            close = difflib.get_close_matches(str(key), SITE_SETTINGS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigurationError(str(key), f"unknown site setting in {origin}{hint}")


def load_config(site: Path | None = None) -> MonitoringConfig:
    """The defaults, with every key of `site` (if given) replacing its default."""
    values = _read(DEFAULTS_FILE)
    _check_keys(values, DEFAULTS_FILE)
    missing = [key for key in SITE_SETTINGS if key not in values]
    if missing:
        raise ConfigurationError(missing[0], f"missing from {DEFAULTS_FILE}")
    origin = dict.fromkeys(values, DEFAULTS_FILE)
    if site is not None:
        overlay = _read(site)
        _check_keys(overlay, site)
        values.update(overlay)
        origin.update(dict.fromkeys(overlay, site))
    typed = {key: _typed(key, values[key], _TYPES[key], origin[key]) for key in SITE_SETTINGS}
    try:
        config = MonitoringConfig(**typed)
        alert_specs(config)  # `alerts_off` names alerts: refused here, with its file
        return config
    except ConfigurationError as exc:
        # "latency_slo_overrides[dining]", "slo_latency.target" -> the top-level key
        key = re.split(r"[\[.]", exc.setting, maxsplit=1)[0]
        raise ConfigurationError(exc.setting, f"{exc.problem} ({origin[key]})") from None
