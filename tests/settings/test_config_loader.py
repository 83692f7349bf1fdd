"""The configuration loader itself (``gpu_exporter/settings/config.py``,
``config_types.py``): each value type at its edges, the exact line an operator
reads for each kind of mistake, and where the loader says a value came from.
Fast, without the command line, so mutation testing runs it per mutant
(``tests/settings/test_config.py`` covers the flags as a user types them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.settings.config import ConfigError, Settings, _origin, load, read_config_file
from gpu_exporter.settings.config_types import (
    FIXED_PATHS,
    check_telemetry_path,
    parse_duration,
    parse_listen_address,
)


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exporter.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))  # "\udce9": the byte 0xe9
    return path


def problem(flags: dict[str, object], path: Path | None = None,
            known: list[str] | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        load(flags, path, known_collectors=known)
    return str(err.value)


# --- durations -------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("1d", 86400.0), ("1h30m", 5400.0), ("1.5m", 90.0), ("100ms", 0.1), (" 2s ", 2.0),
    ("1m1s500ms", 61.5), ("0s", 0.0), ("-1", -1.0), (" 7 ", 7.0), (0, 0.0), (2.5, 2.5)])
def test_a_duration_in_seconds(text: object, seconds: float) -> None:
    value = parse_duration(text)
    assert value == pytest.approx(seconds) and type(value) is float


@pytest.mark.parametrize("text", ["1s 2s", "x1s", "1s!", "1 s", "-1s", "1.s", "ms", " "])
def test_a_duration_must_be_units_one_after_the_other(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text)
    assert str(err.value) == f"expected a duration like 1s, 500ms or 1m30s, got {text!r}"


@pytest.mark.parametrize("value", [True, False, None, [1], {"s": 1}])
def test_a_duration_is_a_number_or_text(value: object) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(value)
    assert str(err.value) == "expected a duration like 1s or 500ms"


# --- listen address, telemetry path ----------------------------------------------------------
@pytest.mark.parametrize(("text", "parsed"), [
    (":9835", ("0.0.0.0", 9835)), ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:65535", ("::1", 65535)), ("[::]:80", ("::", 80)), ("node:1", ("node", 1))])
def test_a_listen_address(text: str, parsed: tuple[str, int]) -> None:
    assert parse_listen_address(text) == parsed


@pytest.mark.parametrize(("text", "message"), [
    ("9835", "expected host:port, got '9835'"),
    ("node:http", "port must be a number, got 'http'"),
    ("node:", "port must be a number, got ''"),
    ("node:65536", "port must be 0-65535, got 65536"),
    ("node:-1", "port must be 0-65535, got -1")])
def test_a_bad_listen_address_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_listen_address(text)
    assert str(err.value) == message


def test_a_telemetry_path() -> None:
    assert check_telemetry_path("/metrics") == "/metrics"
    assert check_telemetry_path("/diagnosis/metrics") == "/diagnosis/metrics"
    with pytest.raises(ValueError, match=r"^must start with /$"):
        check_telemetry_path("metrics")
    for taken in FIXED_PATHS:
        with pytest.raises(ValueError) as err:
            check_telemetry_path(taken)
        assert str(err.value) == (f"{taken} is the exporter's own endpoint; choose another "
                                  "path (taken: /, /-/healthy, /-/ready, /diagnosis)")


# --- the config file -------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "null\n", "# only a comment\n"])
def test_an_empty_config_file_sets_nothing(tmp_path: Path, text: str) -> None:
    assert read_config_file(config(tmp_path, text)) == {}
    assert load({}, config(tmp_path, text)) == Settings()


@pytest.mark.parametrize(("text", "message"), [
    ("poll: [1, 2\n", "line 2, column 1: did not find expected ',' or ']'"),
    ("a: b: c\n", "line 1, column 5: mapping values are not allowed in this context"),
    ("\tpoll: 1\n", "line 1, column 1: found character that cannot start any token"),
    ("- a\n", "expected a mapping of settings at the top level, got list"),
    ("7\n", "expected a mapping of settings at the top level, got int"),
    ("poll: \x00\n", "line 1, column 7: control characters are not allowed (0x00)"),
    ("poll: {interval: 1s}\n\udce9\n", "line 2, column 1: not UTF-8 text (byte 0xe9)"),
    ("poll: &a [1]\nlog: *b\n", "line 2, column 6: found undefined alias 'b'"),
    ("poll: {interval: .nan}\n", "line 1, column 18: '.nan' is not a finite number"),
])
def test_a_malformed_config_file_is_one_line_with_the_place(tmp_path: Path, text: str,
                                                            message: str) -> None:
    path = config(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        read_config_file(path)
    assert str(err.value) == f"config file {path}: {message}"


def test_a_config_file_that_is_missing_or_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        read_config_file(tmp_path / "nope.yaml")
    assert str(err.value) == f"config file {tmp_path / 'nope.yaml'}: no such file"
    with pytest.raises(ConfigError) as err:
        read_config_file(tmp_path)
    assert str(err.value) == f"config file {tmp_path}: is a directory, not a file"


def test_file_values_load_and_two_loads_compare_equal(tmp_path: Path) -> None:
    path = config(tmp_path, "poll: {interval: 1m30s}\nweb: {max_requests: 3}\n")
    settings = load({}, path)
    assert settings.poll.interval == 90.0 and settings.web.max_requests == 3
    assert settings.web.telemetry_path == "/metrics"  # the rest from defaults
    assert settings == load({}, path)
    assert settings != load({}, None)
    assert settings.model_fields_set == {"poll", "web"}
    assert load({"poll": {"interval": 2}}, path).poll.interval == 2.0  # flags win


# --- the line an operator reads --------------------------------------------------------------
def test_a_bad_flag_names_the_flag_the_problem_and_the_value_once() -> None:
    assert problem({"poll": {"interval": "soon"}}) == (
        "poll.interval from flag --poll.interval: expected a duration like 1s, 500ms or 1m30s, "
        "got 'soon'")
    assert problem({"web": {"max_requests": 0}}) == (
        "web.max_requests from flag --web.max-requests: Input should be greater than or equal "
        "to 1 (got 0)")


def test_a_bad_file_value_names_the_file_and_counts_the_other_problems(tmp_path: Path) -> None:
    path = config(tmp_path, "poll: {interval: 0.01, timeout: 0}\n")
    assert problem({}, path) == (
        f"poll.interval from config file {path}: Input should be greater than or equal to "
        "0.05 (got 0.01) (and 1 more problem(s))")


def test_an_unknown_setting_or_a_section_that_is_not_one(tmp_path: Path) -> None:
    path = config(tmp_path, "web: {listen_adress: ':1'}\n")
    assert problem({}, path) == f"web.listen_adress from config file {path}: unknown setting"
    path = config(tmp_path, "web: 5\n")
    assert problem({}, path) == (f"web from config file {path}: Input should be a valid "
                                 "dictionary or instance of WebConfig (got 5)")
    path = config(tmp_path, "poll: {interval: {every: 5}}\n")  # a mapping is not shown
    assert problem({}, path).endswith("poll.interval from config file "
                                      f"{path}: expected a duration like 1s or 500ms")


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_EXPORTER_WEB__LISTEN_ADDRESS", "nowhere")
    path = config(tmp_path, "web: {listen_address: 'also-bad'}\n")
    assert problem({}, path) == (
        "web.listen_address from environment variable GPU_EXPORTER_WEB__LISTEN_ADDRESS: "
        "expected host:port, got 'nowhere'")


def test_unknown_collectors_name_the_first_in_order_and_the_known_ones(tmp_path: Path) -> None:
    path = config(tmp_path, "collectors: {zzz: true, aaa: false, host: true}\n")
    assert problem({}, path, known=["host", "device"]) == (
        f"collectors.aaa from config file {path}: unknown collector 'aaa'; known: device, host")
    assert problem({"collectors": {"gpus": True}}, None, known=["host"]) == (
        "collectors.gpus from flag --collector.gpus: unknown collector 'gpus'; known: host")
    settings = load({}, path, known_collectors=["zzz", "aaa", "host"])
    assert settings.collector_enabled("aaa", True) is False
    assert settings.collector_enabled("zzz", False) is True
    assert settings.collector_enabled("device", True) is True  # not set: the default
    assert settings.collector_enabled("device", False) is False
    assert load({}, path).collectors == {"zzz": True, "aaa": False, "host": True}  # unchecked


def test_where_a_value_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loc = ("web", "listen_address")
    file = tmp_path / "c.yaml"
    nested = {"web": {"listen_address": "x"}}
    assert _origin(loc, nested, nested, file) == "flag --web.listen-address"
    assert _origin(loc, {"web": {}}, nested, file) == f"config file {file}"
    assert _origin(loc, {"web": "flat"}, nested, None) == "configuration"
    assert _origin(loc, {}, nested, None) == "configuration"  # no file: not from one
    assert _origin(loc, {}, {"web": {"other": 1}}, file) == "configuration"
    assert _origin(("web",), {}, {"web": 5}, file) == f"config file {file}"
    monkeypatch.setenv("GPU_EXPORTER_WEB__LISTEN_ADDRESS", "y")
    assert _origin(loc, {}, nested, file) == (
        "environment variable GPU_EXPORTER_WEB__LISTEN_ADDRESS")
    assert _origin(loc, nested, nested, file) == "flag --web.listen-address"


def test_a_host_name_is_kept_as_written_less_the_brackets_of_an_ipv6_address() -> None:
    assert parse_listen_address("XX-box:9") == ("XX-box", 9)
    assert parse_listen_address("[fe80::1%eth0]:9") == ("fe80::1%eth0", 9)
