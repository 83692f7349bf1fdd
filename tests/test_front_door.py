"""Every settings rule, through each of the three ways an operator gives a
setting: the config file (``--config.file``), the environment
(``GPU_EXPORTER_*``, ``__`` between a section and its setting) and the flags.

The cases are derived from the declarations (``settings_fields()``), so a
setting added tomorrow is covered by its bounds, its type and its choices
without a line here; a setting with a ``check`` of a kind this file has no
bad example for fails ``test_every_check_has_a_refused_example`` until one is
added. The command runs in-process through ``cli.main`` (the parser, the
loader and the error path the installed command runs) with the daemon itself
replaced, so a value wrongly accepted ends the case with exit 0 instead of
starting a server; three subprocess cases show that the in-process answer is
the installed command's, byte for byte.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from gpu_exporter import cli
from gpu_exporter.daemon import exporter as daemon
from gpu_exporter.daemon import logs
from gpu_exporter.settings import config, config_types
from gpu_exporter.settings.config import ENV_PREFIX, Settings, flag_settings, settings_fields
from gpu_exporter.settings.config_types import Flag
from gpu_exporter.settings.sections import FieldSpec, Section
from gpu_exporter.settings.thresholds import DiagnosisConfig
from tests.simnode import SimRun, settings

PATHS = ("file", "environment", "flag")
FLAGS = {s.key: s for s in flag_settings()}
FIELDS = dict(settings_fields())

# A value each ``check=`` refuses, with why it is wrong. Keyed by the check,
# so a new check on a new setting is one line here (the test below says which).
REFUSED_BY_CHECK: dict[Any, str] = {
    config._listen_address: "9100",  # no colon: not host:port
    config_types.check_telemetry_path: "metrics",  # not absolute
    config._path_or_off: "relative/state.json",  # not absolute
    config._kmsg_path: "/dev/null",  # a character device that is not 1:11
}


@dataclass(frozen=True)
class Case:
    key: str
    value: Any  # as the config file gives it (YAML's own type)
    refused: bool
    why: str

    @property
    def text(self) -> str:
        """The value as a flag or an environment variable gives it."""
        if isinstance(self.value, float):
            return repr(self.value)
        if isinstance(self.value, list | tuple | dict):
            return json.dumps(self.value)
        return str(self.value)


def _kind(spec: FieldSpec) -> Any:
    tp = spec.annotation
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _step(tp: Any) -> float:
    # Just past a bound: one for a count, a thousandth for a share or a duration.
    return 1 if tp is int else 0.001


def _cases_for(key: str, spec: FieldSpec) -> Iterator[Case]:
    tp = _kind(spec)
    b = spec.bounds
    if tp in (int, float):
        step = _step(tp)
        num = int if tp is int else float
        if b.ge is not None:
            yield Case(key, num(b.ge - step), True, f"below ge={b.ge}")
            yield Case(key, num(b.ge), False, f"at ge={b.ge}")
        if b.gt is not None:
            yield Case(key, num(b.gt), True, f"at gt={b.gt}")
            yield Case(key, num(b.gt + step), False, f"just above gt={b.gt}")
        if b.le is not None:
            yield Case(key, num(b.le + step), True, f"above le={b.le}")
            yield Case(key, num(b.le), False, f"at le={b.le}")
        if b.lt is not None:
            yield Case(key, num(b.lt), True, f"at lt={b.lt}")
            yield Case(key, num(b.lt - step), False, f"just below lt={b.lt}")
        yield Case(key, "twelve", True, f"not a {tp.__name__}")
    if b.max_length is not None:
        yield Case(key, "x" * (b.max_length + 1), True, f"longer than {b.max_length}")
        yield Case(key, "x" * b.max_length, False, f"{b.max_length} long")
    if tp is bool:
        yield Case(key, "maybe", True, "not a bool")
    if typing.get_origin(tp) is Literal:
        yield Case(key, "bogus", True, "not one of the choices")
        for choice in typing.get_args(tp):
            yield Case(key, choice, False, f"the choice {choice!r}")
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[0] is int:
        yield Case(key, ["twelve"], True, "an item that is not an int")
    if typing.get_origin(tp) is dict:
        yield Case(key, {"device": "maybe"}, True, "a value that is not a bool")
    if spec.check is not None and spec.check in REFUSED_BY_CHECK:
        yield Case(key, REFUSED_BY_CHECK[spec.check], True, "refused by its check")


def all_cases() -> list[tuple[Case, str]]:
    out = []
    for key, spec in settings_fields():
        for case in _cases_for(key, spec):
            for path in PATHS:
                if path == "flag" and key not in FLAGS:
                    continue  # not a flag: the file and the environment only
                if path == "flag" and FLAGS[key].boolean and case.refused:
                    continue  # --X or --no-X: no value to refuse
                out.append((case, path))
    return out


CASES = all_cases()


class Started(Exception):
    """What the replaced daemon raises: the settings were accepted."""


@pytest.fixture
def front_door(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """cli.main with the daemon replaced: what it would have started with."""
    started: list[Settings] = []

    def run(settings: Settings, *_: object) -> int:
        started.append(settings)
        return 0

    monkeypatch.setattr(daemon, "run", run)
    monkeypatch.setattr(logs, "setup", lambda *_: None)
    for name in list(os.environ):
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in config.NOT_SETTINGS:
            monkeypatch.delenv(name)
    return started


def _nested(key: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return dict(out)


def give(case: Case, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command line that gives ``case`` its way (setting the environment)."""
    if path == "flag":
        s = FLAGS[case.key]
        if s.boolean:
            # A bool flag takes no value; its type rule is the environment's and the file's.
            return [s.flag if case.value is True else f"--no-{s.flag[2:]}"]
        return [f"{s.flag}={case.text}"]
    if path == "environment":
        monkeypatch.setenv(ENV_PREFIX + case.key.replace(".", "__").upper(), case.text)
        return []
    f = tmp_path / "config.yml"
    f.write_text(json.dumps(_nested(case.key, case.value)))  # JSON is YAML
    return ["--config.file", str(f)]


def _origin_words(case: Case, path: str, tmp_path: Path) -> str:
    if path == "flag":
        return f"from flag {FLAGS[case.key].flag}"
    if path == "environment":
        return f"from environment variable {ENV_PREFIX}{case.key.replace('.', '__').upper()}"
    return f"from config file {tmp_path / 'config.yml'}"


def _value_of(s: Settings, key: str) -> Any:
    node: Any = s
    for part in key.split("."):
        node = getattr(node, part)
    return node


@pytest.mark.parametrize(("case", "path"), CASES,
                         ids=[f"{c.key}-{c.why}-{p}" for c, p in CASES])
def test_each_rule_holds_through_each_way_a_setting_is_given(
        case: Case, path: str, front_door: list[Settings], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = give(case, path, tmp_path, monkeypatch)
    code = cli.main(argv)
    err = capsys.readouterr().err
    if case.refused:
        assert (code, front_door) == (2, []), f"{case} accepted via {path}"
        assert err.endswith("\n") and err.count("\n") == 1, err
        # The setting's key (and the item or entry of a list or mapping) first.
        assert re.match(rf"gpu-exporter: error: {re.escape(case.key)}(\.\w+)? from ", err), err
        assert _origin_words(case, path, tmp_path) in err, err
        assert "Traceback" not in err
    else:
        assert (code, err) == (0, ""), f"{case} refused via {path}: {err}"
        got = _value_of(front_door[0], case.key)
        want = case.value
        if isinstance(got, float):
            assert math.isclose(got, float(want), rel_tol=0, abs_tol=1e-12)
        else:
            assert got == want


def test_every_check_has_a_refused_example() -> None:
    """A setting's own check is a rule too: one without an example here is a
    rule no test gives a bad value to."""
    missing = [key for key, spec in settings_fields()
               if spec.check is not None and spec.check not in REFUSED_BY_CHECK]
    assert missing == []


def test_every_bounded_typed_or_chosen_setting_has_cases_through_each_way() -> None:
    """The derivation did not skip a setting: each one with a bound, a number
    type, a bool, a choice or a check has a refused case through the file,
    the environment and (when it is a flag taking a value) the flag."""
    covered: dict[str, set[str]] = {}
    for case, path in CASES:
        if case.refused:
            covered.setdefault(case.key, set()).add(path)
    for key, spec in settings_fields():
        tp = _kind(spec)
        ruled = (spec.bounds != type(spec.bounds)() or tp in (int, float, bool)
                 or typing.get_origin(tp) in (Literal, tuple, dict) or spec.check is not None)
        if not ruled:
            continue
        want = {"file", "environment"} | ({"flag"} if key in FLAGS and not FLAGS[key].boolean
                                          else set())
        assert covered.get(key, set()) >= want, key
    # And the flags are the ones the command line has: none derived elsewhere.
    assert all(next(m for m in FIELDS[k].metadata if isinstance(m, Flag)) for k in FLAGS)


# --- the in-process answer is the installed command's ------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_the_command_answers_as_the_in_process_front_door(
        path: str, front_door: list[Settings], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    case = Case("poll.interval", 0.049, True, "below ge=0.05")
    argv = give(case, path, tmp_path, monkeypatch)
    assert cli.main(argv) == 2
    in_process = capsys.readouterr().err
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}
    if path == "environment":
        env["GPU_EXPORTER_POLL__INTERVAL"] = case.text
    proc = subprocess.run([sys.executable, "-m", "gpu_exporter", *argv], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, in_process, "")


# --- rules that span settings: at start and at reload ----------------------------------

def _sections() -> list[type[Section]]:
    out: list[type[Section]] = []
    todo: list[type[Section]] = [Settings]
    while todo:
        model = todo.pop()
        out.append(model)
        todo += [f.annotation for f in model.model_fields.values()
                 if isinstance(f.annotation, type) and issubclass(f.annotation, Section)]
    return out


# Each section with a rule across its settings, the section's key and a
# violation of it in each section's own settings (each one alone valid).
CROSS_RULES: dict[type[Section], tuple[str, dict[str, Any], str]] = {
    DiagnosisConfig: ("diagnosis", {"hardware_xids": [65000], "application_xids": [65000]},
                      "Xid 65000 is in both hardware_xids and application_xids"),
}


def test_every_rule_across_settings_is_tried() -> None:
    spanning = {m for m in _sections() if m._check is not Section._check}
    assert spanning == set(CROSS_RULES)


@pytest.mark.parametrize("path", ["file", "environment"])
@pytest.mark.parametrize("model", list(CROSS_RULES), ids=lambda m: m.__name__)
def test_a_rule_across_settings_is_refused_at_start_and_at_reload(
        model: type[Section], path: str, front_door: list[Settings], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    section, values, sentence = CROSS_RULES[model]
    f = tmp_path / "config.yml"
    if path == "file":
        f.write_text(json.dumps({section: values}))
        argv = ["--config.file", str(f)]
    else:
        for name, value in values.items():
            monkeypatch.setenv(f"{ENV_PREFIX}{section.upper()}__{name.upper()}",
                               json.dumps(value))
        argv = []
    for name, value in values.items():  # each alone is valid
        assert _value_of(Settings(**{section: {name: value}}), f"{section}.{name}") == \
            tuple(value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and sentence in err and err.startswith(
        f"gpu-exporter: error: {section} from "), err

    # At reload: the same loader the daemon keeps (cli.settings_loader), first
    # with a good configuration, then the bad one.
    for name in values:
        monkeypatch.delenv(f"{ENV_PREFIX}{section.upper()}__{name.upper()}", raising=False)
    f.write_text(json.dumps({"poll": {"interval": "3s"}}))
    load = cli.settings_loader(["--config.file", str(f)])
    with SimRun("healthy", collectors={"processes": False}) as run:
        run.poll()
        assert run.exporter.reload(load)
        running = run.exporter.settings
        assert running.poll.interval == 3.0
        assert run.poll(3, interval=3).get("gpu_exporter_config_last_reload_success") == 1.0
        if path == "file":
            f.write_text(json.dumps({"poll": {"interval": "5s"}, section: values}))
        else:
            f.write_text(json.dumps({"poll": {"interval": "5s"}}))
            for name, value in values.items():
                monkeypatch.setenv(f"{ENV_PREFIX}{section.upper()}__{name.upper()}",
                                   json.dumps(value))
        assert not run.exporter.reload(load)
        assert run.exporter.settings is running  # the old settings run on, whole
        assert run.poll(3, interval=3).get("gpu_exporter_config_last_reload_success") == 0.0
    assert settings().diagnosis == DiagnosisConfig()
