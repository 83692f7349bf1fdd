"""Every file the alerting generator owns, and writing or checking them."""

from __future__ import annotations

from pathlib import Path

from gpu_exporter_mixin.alerting.cases import render_test_file, test_files
from gpu_exporter_mixin.alerting.config import AlertConfig
from gpu_exporter_mixin.alerting.links import link_problems, write_links
from gpu_exporter_mixin.alerting.render import prometheus_rule, rules_file, test_build_file
from gpu_exporter_mixin.alerting.runbook import runbook

TEST_BUILD = Path("alerts/gpu-exporter.rules.test-build.yml")
PROMETHEUS_RULE = Path("deploy/kubernetes/prometheusrule.yaml")
# The same rules inside the Helm chart, which may read only files in its folder.
CHART_RULES = Path("deploy/helm/gpu-exporter/files/gpu-exporter.rules.yml")
# Where users and the compose stack find them: a link to the chart's file.
RULES = Path("alerts/gpu-exporter.rules.yml")
LINKS = {RULES: CHART_RULES}
# The exporter renders its own /runbook from the diagnosis table (web/runbook.py).
RUNBOOK = Path("docs/runbook.md")
TESTS_DIR = Path("alerts/tests")


def outputs(config: AlertConfig) -> dict[Path, str]:
    """Path (relative to the repository) -> the content the generator produces."""
    rules = rules_file(config)
    out = {
        CHART_RULES: rules,
        TEST_BUILD: test_build_file(config),
        PROMETHEUS_RULE: prometheus_rule(config),
        RUNBOOK: runbook(config),
    }
    for tf in test_files(config):
        out[TESTS_DIR / tf.name] = render_test_file(config, tf)
    return out


def differences(config: AlertConfig, root: Path = Path(".")) -> list[str]:
    """What differs between the committed files and the generator's output."""
    wanted = outputs(config)
    problems = link_problems(LINKS, root)
    for rel, text in wanted.items():
        path = root / rel
        if not path.exists():
            problems.append(f"{rel}: missing")
        elif path.read_text() != text:
            problems.append(f"{rel}: differs from the generator's output")
    for path in sorted((root / TESTS_DIR).glob("*.yml")):
        if path.relative_to(root) not in wanted:
            problems.append(f"{path.relative_to(root)}: not produced by the generator")
    return problems


def write(config: AlertConfig, root: Path = Path(".")) -> list[Path]:
    """Write every output; return the paths whose content changed."""
    wanted = outputs(config)
    changed = []
    for rel, text in wanted.items():
        path = root / rel
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(rel)
    for path in sorted((root / TESTS_DIR).glob("*.yml")):
        if path.relative_to(root) not in wanted:
            path.unlink()
            changed.append(path.relative_to(root))
    return changed + write_links(LINKS, root)
