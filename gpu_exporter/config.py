"""The exporter's configuration: one pydantic model, filled from (highest first)
command-line flags, ``GPU_EXPORTER_*`` environment variables, the YAML file
given with ``--config.file``, and defaults.

One naming rule links the three: the flag ``--web.listen-address`` is the YAML
key ``web: {listen_address: ...}`` and the variable
``GPU_EXPORTER_WEB__LISTEN_ADDRESS``. A bad value is reported as one line naming
the setting, where it came from and what is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gpu_exporter.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.config_types import (
    DEFAULT_POD_RESOURCES_SOCKET,
    Duration,
    check_telemetry_path,
    parse_duration,
    parse_listen_address,
)
from gpu_exporter.thresholds import DiagnosisConfig


class ConfigError(Exception):
    """A configuration problem, already worded for the operator (one line)."""


ENV_PREFIX = "GPU_EXPORTER_"
DEFAULT_LISTEN_ADDRESS = ":9835"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WebConfig(_Section):
    listen_address: str = DEFAULT_LISTEN_ADDRESS
    telemetry_path: str = "/metrics"
    config_file: Path | None = None
    max_requests: int = Field(8, ge=1, le=256)
    # How long a client may take over a request head, from its first byte.
    request_timeout: Duration = Field(10.0, gt=0)
    # Open connections at most; at the limit the longest-idle one is closed.
    max_connections: int = Field(1024, ge=2, le=1_000_000)
    # How long a kept-alive connection may wait for its next request.
    idle_timeout: Duration = Field(300.0, gt=0)

    @field_validator("listen_address")
    @classmethod
    def _address(cls, v: str) -> str:
        parse_listen_address(v)
        return v

    @field_validator("telemetry_path")
    @classmethod
    def _path(cls, v: str) -> str:
        return check_telemetry_path(v)


class PollConfig(_Section):
    interval: Duration = Field(DEFAULT_POLL_INTERVAL_S, ge=0.05, le=3600)
    # How long one GPU's reads may take before the GPU counts as hung and is
    # skipped (its series absent, gpu_up 0) until the stuck call returns.
    timeout: Duration = Field(2.0, gt=0, le=600)


class LogConfig(_Section):
    level: Literal["debug", "info", "warn", "warning", "error"] = "info"
    format: Literal["logfmt", "json"] = "logfmt"


class PathConfig(_Section):
    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")


class ProcessesConfig(_Section):
    max_per_gpu: int = Field(32, ge=0, le=4096)


class MetricsConfig(_Section):
    # Also export the detail families (catalog ``detail``): per-link NVLink
    # counters, sample min/mean/max, host series node_exporter already exports.
    detail: bool = False


class KubernetesConfig(_Section):
    # The kubelet's PodResources socket; attribution is off while no socket is
    # there, and "" switches it off without looking.
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET

    @field_validator("pod_resources_socket")
    @classmethod
    def _socket(cls, v: str) -> str:
        if v and not v.startswith("/"):
            raise ValueError("must be an absolute path (or empty to switch it off)")
        if "\0" in v:
            raise ValueError("must not contain a NUL byte")
        return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__",
                                      extra="forbid", frozen=True)

    web: WebConfig = WebConfig()
    poll: PollConfig = PollConfig()
    log: LogConfig = LogConfig()
    path: PathConfig = PathConfig()
    processes: ProcessesConfig = ProcessesConfig()
    metrics: MetricsConfig = MetricsConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    diagnosis: DiagnosisConfig = DiagnosisConfig()
    baseline_file: Path | None = None
    collectors: dict[str, bool] = Field(default_factory=dict)
    simulate: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags (the constructor's arguments), then the environment; load()
        # adds the config file below them through _with_file().
        return (init_settings, env_settings)

    def collector_enabled(self, name: str, default: bool) -> bool:
        return self.collectors.get(name, default)


class _DictSource(PydanticBaseSettingsSource):
    """The YAML file's values, already parsed."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _with_file(values: dict[str, Any]) -> type[Settings]:
    """Settings whose sources are flags, the environment, then these file values.

    pydantic-settings asks a class method for the sources, so the file's values
    travel in a subclass made for this one load rather than in shared state."""

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, _DictSource(settings_cls, values))

    return _FromFile


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"config file {path}: {problem}{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings at the top "
                          f"level, got {type(data).__name__}")
    return data


def _origin(loc: tuple[Any, ...], flags: dict[str, Any], file_values: dict[str, Any],
            config_file: Path | None) -> str:
    dotted = ".".join(str(p) for p in loc)

    def has(tree: dict[str, Any]) -> bool:
        node: Any = tree
        for part in loc:
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    if has(flags):
        return f"flag --{dotted.replace('_', '-')}"
    env = ENV_PREFIX + "__".join(str(p) for p in loc).upper()
    if env in os.environ:
        return f"environment variable {env}"
    if config_file is not None and has(file_values):
        return f"config file {config_file}"
    return "configuration"


def load(flags: dict[str, Any], config_file: Path | None = None,
         known_collectors: Collection[str] | None = None) -> Settings:
    """Build the settings or raise ConfigError with one operator-facing line.

    ``known_collectors``: the collector names there are; another name under
    ``collectors`` is an error (the caller that assembles the collectors knows
    them, the configuration does not)."""
    file_values = read_config_file(config_file) if config_file else {}
    try:
        built = _with_file(file_values)(**flags)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = tuple(first["loc"])
        name = ".".join(str(p) for p in loc) or "configuration"
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown setting"
        origin = _origin(loc, flags, file_values, config_file)
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        given = first.get("input")
        # The value is shown once: not for an unknown key or a whole section,
        # and not again where the message already quotes it.
        shown = "" if first["type"] == "extra_forbidden" or isinstance(given, dict) \
            or repr(given) in msg else f" (got {given!r})"
        raise ConfigError(f"{name} from {origin}: {msg}{shown}{more}") from None
    # A plain Settings again (values already validated), so two loads of the
    # same configuration compare equal.
    settings = Settings.model_construct(built.model_fields_set,
                                        **{k: getattr(built, k) for k in Settings.model_fields})
    if known_collectors is not None:
        unknown = sorted(set(settings.collectors) - set(known_collectors))
        if unknown:
            origin = _origin(("collectors", unknown[0]), flags, file_values, config_file)
            raise ConfigError(f"collectors.{unknown[0]} from {origin}: unknown collector "
                              f"{unknown[0]!r}; known: " + ", ".join(sorted(known_collectors)))
    return settings

__all__ = ["ConfigError", "Duration", "Settings", "load", "parse_duration"]
