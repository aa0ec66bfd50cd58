"""The settings table of docs/reference.md: every variable the code reads, with defaults
that are true."""

from __future__ import annotations

import dataclasses
import re

import pytest

from platform_common.jobs.queue import QueueSettings
from platform_common.jobs.queue.queue_settings import ENV_VARIABLES as QUEUE_VARIABLES
from platform_common.jobs.store.factory import ENV_NAMESPACES, StoreConfig
from platform_common.jobs_exporter.settings import (
    DEPRECATED_VARIABLES,
    ENVIRONMENT_VARIABLES,
    ExporterSettings,
)
from platform_common.jobs_monitoring.settings_table import setting_rows

ROWS = {row.variable: row for row in setting_rows()}
_ONE_VALUE = re.compile(r"`([^`]*)`")


def test_the_table_lists_exactly_the_strict_namespaces_variables() -> None:
    read = (
        QUEUE_VARIABLES
        | set(ENVIRONMENT_VARIABLES)
        | set(DEPRECATED_VARIABLES)
        | set().union(*ENV_NAMESPACES.values())
    )
    strict = ("QUEUE_", "EXPORTER_", "JOB_STORE_", "JOBSTATE_")
    assert {name for name in ROWS if name.startswith(strict)} == {
        name for name in read if name.startswith(strict)
    }
    assert all(row.meaning and row.read_by for row in ROWS.values())


@pytest.mark.parametrize(
    "variable", [name for name, row in ROWS.items() if _ONE_VALUE.fullmatch(row.default)]
)
def test_the_documented_default_written_out_is_the_default(variable: str) -> None:
    """Setting a variable to the value the table shows as its default changes nothing."""
    row = ROWS[variable]
    raw = row.default.strip("`")
    if "queue" in row.read_by:
        assert QueueSettings.from_env({variable: raw}) == QueueSettings.from_env({})
    if "exporter" in row.read_by:
        assert ExporterSettings.from_env({variable: raw}) == ExporterSettings.from_env({})
    if "JobStore" in row.read_by:
        configured, default = StoreConfig.from_env({variable: raw}), StoreConfig.from_env({})
        # agent_from_env records where the agent came from, not a setting.
        assert dataclasses.replace(configured, agent_from_env=False) == default
