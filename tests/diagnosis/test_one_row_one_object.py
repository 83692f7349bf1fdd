"""A diagnosis row is one object: its rule is registered on it, its prose quotes
the thresholds the rule uses, and its alert, runbook section, scenario and
dashboard colours all follow from it and from one configuration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.diagnosis.rules import RULES, Trend, Verdict, rule
from gpu_exporter.diagnosis.signals import GpuSignals
from gpu_exporter.diagnosis.table import ROWS, Row
from gpu_exporter.settings.thresholds import DiagnosisConfig
from gpu_exporter.simulator import builtin_scenarios
from gpu_exporter_mixin.alerting.config import AlertConfig, AlertConfigError
from gpu_exporter_mixin.alerting.rules import alert_rules
from gpu_exporter_mixin.dashboards.build import node_dashboard
from gpu_exporter_mixin.dashboards.generate import to_json

ROOT = Path(__file__).resolve().parents[2]


def _never(s: GpuSignals, cfg: DiagnosisConfig, trend: Trend) -> Verdict:
    return Verdict(False)


def test_every_row_has_exactly_one_rule_one_scenario_and_one_runbook_section() -> None:
    assert set(RULES) == set(ROWS)
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    scenarios = set(builtin_scenarios())
    for row in ROWS:
        assert row.anchor in scenarios
        assert runbook.count(f"\n## {row.anchor}\n") == 1, row.anchor


def test_a_rule_for_a_row_outside_the_table_fails_at_registration() -> None:
    stray = Row("memory_held_sm_idle", "data_pipline_io", "warning", "s", "e", "f", ("c",), "x")
    with pytest.raises(ImportError, match="not in the diagnosis table"):
        rule(stray)(_never)


def test_a_second_rule_for_a_row_fails_at_registration() -> None:
    with pytest.raises(ImportError, match="two rules"):
        rule(t.THERMAL)(_never)
    assert RULES[t.THERMAL] is not _never


def test_a_misspelled_row_name_fails_at_import() -> None:
    source = ("from gpu_exporter.diagnosis import table as t\n"
              "from gpu_exporter.diagnosis.rules import rule\n"
              "@rule(t.THERMLA)\n"
              "def f(s, cfg, trend): ...\n")
    with pytest.raises(AttributeError, match="THERMLA"):
        exec(compile(source, "misspelled_rule.py", "exec"), {})


def test_a_misspelled_threshold_in_the_prose_fails() -> None:
    row = Row("x", "y", "info", "s", "above {iowait_hihg}", "f", ("c",), "e")
    with pytest.raises(KeyError, match="iowait_hihg"):
        row.evidence_text(DiagnosisConfig())


@pytest.mark.parametrize("row", ROWS, ids=[r.anchor for r in ROWS])
def test_the_prose_types_no_threshold_by_hand(row: Row) -> None:
    """Percentages, degrees, durations and Xid lists come from the config."""
    assert not re.search(r"\d\s*(%|°C|min\b|s\b)", row.evidence), row.evidence
    assert not re.search(r"\b(48|61|79|94|119)\b", row.evidence), row.evidence
    assert set(row.thresholds()) <= set(DiagnosisConfig.model_fields)


def test_alert_prose_quotes_the_configured_thresholds() -> None:
    config = AlertConfig(diagnosis=DiagnosisConfig(memory_near_full_ratio=0.9,
                                                   hardware_xids=(48, 79)))
    by = {r.name: r for r in alert_rules(config)}
    near_full = by[t.MEMORY_NEAR_FULL.alert_name].description
    assert "above 90 % of what processes can allocate" in near_full
    assert "95 %" not in near_full
    assert "(one of 48, 79)" in by[t.XID.alert_name].description


def test_row_alerts_are_overridden_by_row_key_not_by_a_typed_name() -> None:
    config = AlertConfig(for_overrides={"memory_near_full/oom_risk": 120.0})
    by = {r.name: r for r in alert_rules(config)}
    assert by[t.MEMORY_NEAR_FULL.alert_name].for_s == 120.0
    with pytest.raises(AlertConfigError, match="GpuMemoryNearFullOomRisk"):
        alert_rules(AlertConfig(for_overrides={"GpuMemoryNearFullOomRisk": 120.0}))
    with pytest.raises(AlertConfigError, match="memory_near_full/oom_rsik"):
        alert_rules(AlertConfig(severity_overrides={"memory_near_full/oom_rsik": "info"}))


def test_dashboards_colour_by_the_same_thresholds_as_the_alerts() -> None:
    default = to_json(node_dashboard(AlertConfig()))
    tuned = to_json(node_dashboard(AlertConfig(diagnosis=DiagnosisConfig(iowait_high=0.37))))
    assert '"value": 0.37' in tuned and '"value": 0.37' not in default


def test_rules_register_by_call_so_mutation_testing_reaches_them() -> None:
    """mutmut leaves decorated functions unmutated: a condition registered with
    ``@rule(...)`` would silently drop out of ./scripts/mutation.sh."""
    source = (ROOT / "gpu_exporter" / "diagnosis" / "rules.py").read_text()
    decorated = [node.name for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.FunctionDef) and node.decorator_list]
    assert decorated == [], f"register these with rule(row)(fn) below them: {decorated}"
