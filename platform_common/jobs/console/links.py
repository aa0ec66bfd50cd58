"""Where the console links out: the runbooks and the Grafana dashboard of the bundle."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from ..dashboard_ids import QueueOverviewPanel

__all__ = ["ConsoleLinks"]


@dataclass(frozen=True, slots=True)
class ConsoleLinks:
    """Base URLs of the bundle's other pages; a link is shown only when its base is set."""

    runbooks: str | None = None
    """The runbooks' base (the exporter serves them at <exporter>/runbooks/): a runbook
    is <runbooks><AlertName>, e.g. .../runbooks/DeadLetterDepthHigh."""
    grafana_dashboard: str | None = None
    """The queue dashboard's URL in Grafana (<grafana>/d/queue-overview); an agent type's
    link selects it with the dashboard's `agent_type` variable."""

    def __post_init__(self) -> None:
        for name in ("runbooks", "grafana_dashboard"):
            value = getattr(self, name)
            # Only web addresses: a `javascript:` URL in a link would run on a click.
            if value is not None and urlsplit(value).scheme not in ("http", "https"):
                raise ValueError(f"ConsoleLinks.{name} must be an http(s) URL, got {value!r}")

    def runbook(self, alert: str = "") -> str | None:
        """The runbook of `alert` ("" for their index), or None without a runbooks base."""
        if self.runbooks is None:
            return None
        return self.runbooks.rstrip("/") + "/" + alert

    def dashboard(self, agent_type: str | None = None) -> str | None:
        """The dashboard (showing `agent_type` alone, if given), or None without one."""
        if self.grafana_dashboard is None:
            return None
        if agent_type is None:
            return self.grafana_dashboard
        joiner = "&" if "?" in self.grafana_dashboard else "?"
        return self.grafana_dashboard + joiner + urlencode({"var-agent_type": agent_type})

    def panel(self, agent_type: str, panel: str) -> str | None:
        """One panel of the dashboard (a QueueOverviewPanel name, e.g.
        "DEAD_LETTER_DEPTH"), showing `agent_type` alone."""
        shown = self.dashboard(agent_type)
        if shown is None:
            return None
        return shown + "&" + urlencode({"viewPanel": int(QueueOverviewPanel[panel])})
