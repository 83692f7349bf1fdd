"""Configuration: flags over environment over file over defaults, and every bad
value reported as one line naming the setting, its source and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.cli import parse_settings
from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.settings.config import ConfigError, FlagSetting, flag_settings, parse_duration


def test_defaults() -> None:
    s = parse_settings([])
    assert s.web.listen_address == ":9835"
    assert s.web.telemetry_path == "/metrics"
    assert s.poll.interval == DEFAULT_POLL_INTERVAL_S == 2.0
    assert s.log.format == "logfmt"
    assert s.collector_enabled("device", True)


@pytest.mark.parametrize("text,seconds", [
    ("1s", 1.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("0.25", 0.25), (3, 3.0),
])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "1x", "s", "1s2", "fast", True])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_flags_beat_environment_beat_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("poll: {interval: 5s}\nweb: {telemetry_path: /file}\n"
                   "log: {level: debug}\ncollectors: {device: false}\n")
    monkeypatch.setenv("GPU_EXPORTER_WEB__TELEMETRY_PATH", "/env")
    monkeypatch.setenv("GPU_EXPORTER_LOG__LEVEL", "warn")
    s = parse_settings(["--config.file", str(cfg), "--log.level", "error"])
    assert s.poll.interval == 5.0  # file only
    assert s.web.telemetry_path == "/env"  # env beats file
    assert s.log.level == "error"  # flag beats env
    assert s.collector_enabled("device", True) is False


def test_collector_flags() -> None:
    assert parse_settings(["--no-collector.device"]).collector_enabled("device", True) is False
    assert parse_settings(["--collector.device"]).collector_enabled("device", False) is True


def test_collector_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_EXPORTER_COLLECTORS__DEVICE", "false")
    assert parse_settings([]).collector_enabled("device", True) is False


def test_environment_sections_lists_and_names_in_any_case(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("gpu_exporter_collectors", '{"device": false, "nvlink": false}')
    monkeypatch.setenv("GPU_EXPORTER_COLLECTORS__NVLINK", "true")  # the finer one wins
    monkeypatch.setenv("GPU_EXPORTER_WEB", '{"telemetry_path": "/gpu"}')
    monkeypatch.setenv("gpu_exporter_web__listen_address", "[::1]:9900")
    monkeypatch.setenv("GPU_EXPORTER_DIAGNOSIS__HARDWARE_XIDS", "[79, 48]")
    monkeypatch.setenv("GPU_EXPORTER_DIAGNOSIS__WINDOW", "1m")
    # Not settings: a systemd unit passes GPU_EXPORTER_ARGS to the exporter as flags.
    monkeypatch.setenv("GPU_EXPORTER_ARGS", "--poll.interval 1s")
    monkeypatch.setenv("GPU_EXPORTER_LONG_TESTS", "1")
    s = parse_settings(["--web.telemetry-path", "/flag"])
    assert s.collectors == {"device": False, "nvlink": True}
    assert (s.web.telemetry_path, s.web.listen_address) == ("/flag", "[::1]:9900")
    assert s.diagnosis.hardware_xids == (79, 48) and s.diagnosis.window == 60.0
    assert s.poll.interval == DEFAULT_POLL_INTERVAL_S


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("GPU_EXPORTER_WEB", "not json",
     "web from environment variable GPU_EXPORTER_WEB: expected JSON"),
    ("GPU_EXPORTER_WEB__BOGUS", "1",
     "web.bogus from environment variable GPU_EXPORTER_WEB__BOGUS: unknown setting"),
    ("GPU_EXPORTER_COLLECTORS__DEVICE", "maybe",
     "collectors.device from environment variable GPU_EXPORTER_COLLECTORS__DEVICE"),
])
def test_bad_environment_settings_name_the_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        parse_settings([])
    assert expected in str(err.value)


@pytest.mark.parametrize("argv,expected", [
    (["--poll.interval", "fast"], "poll.interval from flag --poll.interval"),
    (["--poll.interval", "0s"], "poll.interval"),
    (["--web.listen-address", "nope"], "web.listen_address from flag --web.listen-address"),
    (["--web.listen-address", ":99999"], "port must be 0-65535"),
    (["--log.level", "loud"], "log.level from flag --log.level"),
    (["--log.format", "xml"], "log.format"),
    (["--web.telemetry-path", "metrics"], "must start with /"),
])
def test_bad_flag_values_name_the_setting(argv: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings(argv)
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_file_value_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("poll:\n  interval: soon\n")
    with pytest.raises(ConfigError) as err:
        parse_settings(["--config.file", str(cfg)])
    assert f"poll.interval from config file {cfg}" in str(err.value)


def test_unknown_setting_in_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("web:\n  listen_adress: ':1'\n")
    with pytest.raises(ConfigError) as err:
        parse_settings(["--config.file", str(cfg)])
    assert "web.listen_adress" in str(err.value) and "unknown setting" in str(err.value)


def test_unknown_collector_in_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("collectors: {gpus: true}\n")
    with pytest.raises(ConfigError) as err:
        parse_settings(["--config.file", str(cfg)])
    assert "unknown collector 'gpus'" in str(err.value)


@pytest.mark.parametrize("content,expected", [
    ("poll: [1, 2\n", "line 2, column 1"),
    ("- a\n- b\n", "expected a mapping"),
    ("web: {listen_address: ':1'\n", "config file"),
])
def test_malformed_files(tmp_path: Path, content: str, expected: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(content)
    with pytest.raises(ConfigError) as err:
        parse_settings(["--config.file", str(cfg)])
    assert expected in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        parse_settings(["--config.file", str(tmp_path / "nope.yaml")])


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_EXPORTER_POLL__INTERVAL", "often")
    with pytest.raises(ConfigError) as err:
        parse_settings([])
    assert "environment variable GPU_EXPORTER_POLL__INTERVAL" in str(err.value)


# --- the diagnosis and the baseline are no collectors -------------------------


def test_the_derivations_are_switched_by_their_own_settings(tmp_path: Path) -> None:
    from gpu_exporter.daemon.pipeline import STAGES

    assert parse_settings([]).diagnosis.enabled is True
    off = parse_settings(["--no-diagnosis.enabled"])
    assert off.diagnosis.enabled is False and not STAGES["diagnosis"].wanted(off)
    assert not STAGES["baseline"].wanted(parse_settings([]))
    assert STAGES["baseline"].wanted(parse_settings(["--baseline.file", str(tmp_path / "b")]))


@pytest.mark.parametrize("given", ["flag", "file", "environment"])
def test_the_retired_diagnosis_switch_still_works_with_a_warning(
        given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A node upgraded with --no-collector.diagnosis in its arguments keeps
    running as it did, and its log names the setting to use now."""
    argv: list[str] = []
    if given == "flag":
        argv = ["--no-collector.diagnosis"]
    elif given == "file":
        cfg = tmp_path / "c.yaml"
        cfg.write_text("collectors: {diagnosis: false, device: true}\n")
        argv = ["--config.file", str(cfg)]
    else:
        monkeypatch.setenv("GPU_EXPORTER_COLLECTORS__DIAGNOSIS", "false")
    settings = parse_settings(argv)
    assert settings.diagnosis.enabled is False
    assert "diagnosis" not in settings.collectors
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "collectors.diagnosis" in warning and "deprecated" in warning
    assert "diagnosis.enabled" in warning


def test_the_new_diagnosis_switch_wins_over_the_retired_one(
        caplog: pytest.LogCaptureFixture) -> None:
    settings = parse_settings(["--no-collector.diagnosis", "--diagnosis.enabled"])
    assert settings.diagnosis.enabled is True
    assert "ignored" in caplog.text


def test_the_retired_baseline_switch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "baseline.json")
    assert parse_settings(["--baseline.file", path, "--no-collector.baseline"]
                          ).baseline_file is None
    assert "switched off as asked" in caplog.text
    assert str(parse_settings(["--baseline.file", path, "--collector.baseline"]
                              ).baseline_file) == path
    assert "has no effect" in caplog.text


def test_help_offers_no_collector_switch_for_a_derivation(
        capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_exporter.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "--no-diagnosis.enabled" in text
    assert "collector.diagnosis" not in text and "collector.baseline" not in text


def test_an_unknown_collector_is_still_refused() -> None:
    from gpu_exporter.daemon.pipeline import COLLECTORS
    from gpu_exporter.settings.config import load

    with pytest.raises(ConfigError, match="unknown collector 'diagnosys'"):
        load({"collectors": {"diagnosys": False}}, known_collectors=COLLECTORS)


# --- every setting declared once ---------------------------------------------


def test_every_setting_has_a_description_and_a_default() -> None:
    from gpu_exporter.settings.config import settings_fields

    for key, info in settings_fields():
        assert info.description, key
        assert not info.required, key


@pytest.mark.parametrize("setting", flag_settings(), ids=lambda s: s.flag)
def test_the_default_help_states_is_the_default_the_flag_gives(setting: FlagSetting) -> None:
    """--help and the README say "(default X)" from the declaration: given as
    the flag, X is the value the exporter runs with when the flag is absent."""
    default = parse_settings([])
    section, _, leaf = setting.key.rpartition(".")

    def value(s: object) -> object:
        node = getattr(s, section) if section else s
        return getattr(node, leaf)

    shown = setting.help.rpartition("(default ")[2].removesuffix(").")
    if "(default " not in setting.help:
        assert value(default) is None  # no default to show: unset
    elif setting.boolean:
        flag = setting.flag if shown == "on" else "--no-" + setting.flag.removeprefix("--")
        assert value(parse_settings([flag])) == value(default)
    else:
        assert value(parse_settings([setting.flag, shown])) == value(default)


def test_a_misspelled_setting_in_a_selector_is_refused() -> None:
    from gpu_exporter.settings.config import setting_key

    assert setting_key(lambda s: s.path.procfs) == "path.procfs"
    with pytest.raises(AttributeError, match=r"no setting path\.procs"):
        setting_key(lambda s: s.path.procs)  # type: ignore[attr-defined]


def test_the_settings_a_reload_cannot_apply_are_marked_where_declared() -> None:
    from gpu_exporter.daemon.exporter import RESTART_SETTINGS

    assert set(RESTART_SETTINGS) == {"web", "path", "kubernetes", "simulate", "baseline_file"}
