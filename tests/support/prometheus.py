"""A real `prometheus` server for tests: generated config, free port, temp dir, HTTP API.

    with PrometheusServer(targets=["127.0.0.1:9808"], rule_files=[path]) as prom:
        prom.wait_for("queue_depth", lambda result: len(result) == 5)
        [sample] = prom.query('queue_depth{agent_type="dining"}')

Uses the Debian `prometheus` binary (2.42). Every wait polls with a deadline; a failure
message carries the tail of Prometheus' own log so a broken config is easy to read.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.ready_process import start_until_ready
from tests.support.redis_server import find_free_port

__all__ = ["PrometheusError", "PrometheusServer", "Sample", "promtool"]


class PrometheusError(RuntimeError):
    """Prometheus did not start, or its API answered with an error."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One element of an instant-query vector (or a scalar, with empty labels)."""

    labels: dict[str, str]
    value: float


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `promtool ARGS` and return the completed process (the caller checks returncode).

    The timeout only guards against a hang: the SLO stories alone take promtool about a
    minute of CPU, so on a loaded 2-core machine a tighter bound failed a passing run.
    """
    binary = shutil.which("promtool")
    if binary is None:
        raise PrometheusError("promtool is not installed: `apt-get install prometheus`")
    return subprocess.run(
        [binary, *args], input=stdin, capture_output=True, text=True, timeout=600, check=False
    )


class PrometheusServer:
    """A prometheus child process scraping `targets` every `scrape_interval`.

    `targets` are "host:port" strings of one job (`job_name`, path `/metrics`);
    `scrape_configs` adds whole extra jobs. `rule_files` are copied into the temp dir;
    `alertmanager` is "host:port" of an Alertmanager to send alerts to; `features` are
    --enable-feature flags (`exemplar-storage`).
    """

    def __init__(
        self,
        *,
        targets: Sequence[str] = (),
        job_name: str = "queue-exporter",
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        rule_files: Sequence[str | Path] = (),
        alertmanager: str | None = None,
        scrape_configs: Sequence[Mapping[str, Any]] = (),
        external_labels: Mapping[str, str] | None = None,
        features: Sequence[str] = (),
    ) -> None:
        self.port = find_free_port()
        self.features = tuple(features)
        """--enable-feature values, e.g. "exemplar-storage"."""
        self.directory = Path(tempfile.mkdtemp(prefix="pcj-prometheus-"))
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path = self.directory / "prometheus.log"
        self.config = self._build_config(
            targets,
            job_name,
            scrape_interval,
            evaluation_interval,
            rule_files,
            alertmanager,
            scrape_configs,
            external_labels,
        )
        self.config_path = self.directory / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self._http = httpx.Client(base_url=self.url, timeout=10.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------
    def start(self, timeout: float = 30.0) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusError("prometheus is not installed: `apt-get install prometheus`")
        args = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
            *(f"--enable-feature={feature}" for feature in self.features),
        ]
        self.process = start_until_ready(
            args,
            self._log_path,
            f"http://127.0.0.1:{self.port}/-/ready",
            name="prometheus",
            error=PrometheusError,
            timeout=timeout,
        )
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        self._http.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "<no log>"

    # -- HTTP API ----------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path> and return its `data` (raises PrometheusError on error)."""
        response = self._http.get(f"/api/v1/{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[Sample]:
        """Evaluate `expr` now; a vector gives one Sample per series, a scalar one Sample."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [Sample({}, float(data["result"][1]))]
        return [
            Sample(dict(item["metric"]), float(item["value"][1]))
            for item in data["result"]
            if "value" in item
        ]

    def wait_for(
        self,
        expr: str,
        predicate: Callable[[list[Sample]], bool] = bool,
        timeout: float = 30.0,
    ) -> list[Sample]:
        """Poll `expr` until `predicate(result)` holds; else raise with the last result."""
        deadline = time.monotonic() + timeout
        result: list[Sample] = []
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"{expr!r} never satisfied the predicate; last: {result}")
            time.sleep(0.05)

    def exemplars(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        """/api/v1/query_exemplars: per series, its `seriesLabels` and `exemplars`."""
        return list(self.api("query_exemplars", query=expr, start=str(start), end=str(end)))

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def wait_targets_up(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            if targets and all(t["health"] == "up" for t in targets):
                return targets
            if time.monotonic() >= deadline:
                raise AssertionError(f"targets not all up: {targets}\n{self.log_tail()}")
            time.sleep(0.05)

    def rules(self) -> list[dict[str, Any]]:
        return list(self.api("rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def reload(self) -> None:
        """Re-read the config file (after editing `config_path` or a rule file)."""
        response = self._http.post("/-/reload")
        if response.status_code != 200:
            raise PrometheusError(f"reload failed: {response.text}")

    # -- config ------------------------------------------------------------
    def _build_config(
        self,
        targets: Sequence[str],
        job_name: str,
        scrape_interval: str,
        evaluation_interval: str,
        rule_files: Sequence[str | Path],
        alertmanager: str | None,
        scrape_configs: Sequence[Mapping[str, Any]],
        external_labels: Mapping[str, str] | None,
    ) -> dict[str, Any]:
        global_section: dict[str, Any] = {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        }
        if external_labels:
            global_section["external_labels"] = dict(external_labels)
        config: dict[str, Any] = {"global": global_section}
        copied = []
        for index, rule_file in enumerate(rule_files):
            destination = self.directory / f"rules-{index}-{Path(rule_file).name}"
            shutil.copyfile(rule_file, destination)
            copied.append(str(destination))
        if copied:
            config["rule_files"] = copied
        if alertmanager:
            static = [{"targets": [alertmanager]}]
            config["alerting"] = {"alertmanagers": [{"static_configs": static}]}
        jobs: list[dict[str, Any]] = []
        if targets:
            jobs.append({"job_name": job_name, "static_configs": [{"targets": list(targets)}]})
        jobs.extend(dict(job) for job in scrape_configs)
        config["scrape_configs"] = jobs
        return config
