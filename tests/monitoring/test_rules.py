"""deploy/monitoring's alert rules and scrape config through promtool: `check rules`,
`test rules` (alerts_test.yml: synthetic series on which each alert fires and stays quiet), and
`check config`. The unit tests must catch a broken rule: the same tests run against copies of
alerts.yml with the backlog and dead-letter rules spoiled, and must fail there."""

import os
import re
import shutil
import subprocess

import pytest

from monpaths import ALERTS, ALERTS_TEST, PROMETHEUS_YML, need, PROMTOOL


def promtool(*args, cwd=None):
    """(exit code, stdout and stderr) of one promtool run, bounded in time."""
    p = subprocess.run([need(PROMTOOL)] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stdout + p.stderr


def alert_names(text):
    return re.findall(r"^\s*- alert: (\w+)\s*$", text, re.M)


def test_check_rules():
    with open(ALERTS) as f:
        names = alert_names(f.read())
    rc, out = promtool("check", "rules", ALERTS)
    assert rc == 0, out
    assert "SUCCESS: %d rules found" % len(names) in out, out
    for wanted in ("NsqBrokerDown", "NsqBrokerUnhealthy", "NsqBrokerDiskNearlyFull",
                   "NsqChannelBacklogGrowing", "NsqChannelWithoutConsumers", "NsqDeadLetters"):
        assert wanted in names, names


def test_every_alert_has_for_severity_and_annotations():
    with open(ALERTS) as f:
        text = f.read()
    # Each rule's block: from its `- alert:` line to the next one.
    blocks = re.split(r"^\s*- alert: ", text, flags=re.M)[1:]
    assert blocks
    for block in blocks:
        name = block.split("\n", 1)[0].strip()
        assert re.search(r"^\s+for: \d+[smh]\s*$", block, re.M), name
        assert re.search(r"^\s+severity: (critical|warning)\s*$", block, re.M), name
        assert re.search(r"^\s+summary: ", block, re.M), name
        assert re.search(r"^\s+description: ", block, re.M), name


def test_rule_unit_tests_pass():
    rc, out = promtool("test", "rules", os.path.basename(ALERTS_TEST),
                       cwd=os.path.dirname(ALERTS_TEST))
    assert rc == 0 and "SUCCESS" in out, out


@pytest.mark.parametrize("alert, spoil", [
    # No threshold: a small growing channel fires too early.
    ("NsqChannelBacklogGrowing", ("nsq_channel_depth > 1000", "nsq_channel_depth > 0")),
    # Paused channels not left out.
    ("NsqChannelBacklogGrowing", ("== 1\n", "== 2\n")),
    # A counter that stands still fires.
    ("NsqDeadLetters", ("increase(nsq_channel_dead_lettered_total[10m]) > 0",
                        "nsq_channel_dead_lettered_total > 0")),
    # Never fires.
    ("NsqDeadLetters", ("increase(nsq_channel_dead_lettered_total[10m]) > 0",
                        "increase(nsq_channel_dead_lettered_total[10m]) > 100")),
])
def test_rule_unit_tests_catch_a_spoiled_rule(tmp_path, alert, spoil):
    with open(ALERTS) as f:
        text = f.read()
    old, new = spoil
    assert text.count(old) == 1, "alerts.yml changed: update this test's spoilers (%r)" % old
    (tmp_path / "alerts.yml").write_text(text.replace(old, new))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yml")
    rc, out = promtool("test", "rules", "alerts_test.yml", cwd=str(tmp_path))
    assert rc != 0, "promtool test rules passed with %s spoiled:\n%s" % (alert, out)
    assert "alertname: %s" % alert in out, out


def test_check_prometheus_config():
    # From another directory: rule_files is relative to the config file.
    rc, out = promtool("check", "config", PROMETHEUS_YML, cwd="/")
    assert rc == 0, out
    assert "SUCCESS: 1 rule files found" in out, out
