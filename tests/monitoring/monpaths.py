"""Where the monitoring files and the Prometheus binaries are, for tests/monitoring.

promtool and prometheus come from Debian's `prometheus` package (/usr/bin); PROMTOOL and
PROMETHEUS override them."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MONITORING = os.path.join(REPO, "deploy", "monitoring")
ALERTS = os.path.join(MONITORING, "alerts.yml")
ALERTS_TEST = os.path.join(MONITORING, "alerts_test.yml")
PROMETHEUS_YML = os.path.join(MONITORING, "prometheus.yml")
DASHBOARD = os.path.join(MONITORING, "grafana-dashboard.json")
PROMTOOL = os.environ.get("PROMTOOL", "/usr/bin/promtool")
PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")


def need(binary):
    """Fails (not skips) when a binary is missing: tests/run.sh installs it."""
    assert os.access(binary, os.X_OK), (
        "%s not found: apt-get install prometheus (or set PROMTOOL / PROMETHEUS)" % binary)
    return binary
