"""The exporter's configuration: one pydantic model, filled from (highest first)
command-line flags, ``GPU_EXPORTER_*`` environment variables, the YAML file
given with ``--config.file``, and defaults.

One naming rule links the three: the flag ``--web.listen-address`` is the YAML
key ``web: {listen_address: ...}`` and the variable
``GPU_EXPORTER_WEB__LISTEN_ADDRESS``. A bad value is reported as one line naming
the setting, where it came from and what is wrong.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpu_exporter import safefile
from gpu_exporter.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.config_types import (
    DEFAULT_KMSG_PATH,
    DEFAULT_POD_RESOURCES_SOCKET,
    Duration,
    check_telemetry_path,
    parse_duration,
    parse_listen_address,
)
from gpu_exporter.thresholds import DiagnosisConfig

log = logging.getLogger(__name__)


class ConfigError(Exception):
    """A configuration problem, already worded for the operator (one line)."""


ENV_PREFIX = "GPU_EXPORTER_"
DEFAULT_LISTEN_ADDRESS = ":9835"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _path_or_off(v: str) -> str:
    """A path setting that "" switches off: absolute, and no NUL byte."""
    if v and not v.startswith("/"):
        raise ValueError("must be an absolute path (or empty to switch it off)")
    if "\0" in v:
        raise ValueError("must not contain a NUL byte")
    return v


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
    # The kernel log device (the driver's Xid lines); "" switches it off.
    kmsg: str = DEFAULT_KMSG_PATH

    @field_validator("kmsg")
    @classmethod
    def _kmsg(cls, v: str) -> str:
        return _path_or_off(v)


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
        return _path_or_off(v)


class Settings(_Section):
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

    def collector_enabled(self, name: str, default: bool) -> bool:
        return self.collectors.get(name, default)


# The environment is read here rather than through pydantic-settings: the
# naming rule is one line, and the library with its providers (cloud secret
# stores, dotenv, TOML) cost every node about 1.5 MiB of memory.


def _takes_json(model: type[BaseModel], path: list[str]) -> bool:
    """Whether the setting at ``path`` holds a section, a mapping or a list:
    its variable's value is JSON then (``GPU_EXPORTER_COLLECTORS='{"device":
    false}'``), as it is a plain string for a single value."""
    annotation: Any = model
    for part in path:
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False  # below a mapping (collectors.<name>): a single value
        field = annotation.model_fields.get(part)
        if field is None:
            return False  # an unknown setting: reported as such by validation
        annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    origin = typing.get_origin(annotation)
    return origin in (dict, list, tuple, set, frozenset) or annotation in (dict, list, tuple)


def environment_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``GPU_EXPORTER_*`` variables give, nested: sections are
    joined by two underscores (``GPU_EXPORTER_WEB__LISTEN_ADDRESS`` is
    ``web.listen_address``), names in any case. A variable that names no
    top-level setting (``GPU_EXPORTER_ARGS``, which systemd units pass as
    flags) is not a setting and is left alone."""
    out: dict[str, Any] = {}
    # A section's JSON first, then its finer variables over it (a prefix sorts first).
    for name in sorted(environ, key=str.upper):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        if path[0] not in Settings.model_fields or "" in path:
            continue
        value: Any = environ[name]
        if _takes_json(Settings, path):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(f"{'.'.join(path)} from environment variable {name}: "
                                  "expected JSON (a mapping or a list), got "
                                  f"{safefile.shown(value)}") from None
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        last = node.get(path[-1])
        node[path[-1]] = _merged(value, last) if isinstance(last, dict) else value
    return out


def _merged(high: Any, low: Any) -> Any:
    """``high`` over ``low``, section by section (a value of ``high`` wins; the
    keys only ``low`` has stay)."""
    if not (isinstance(high, dict) and isinstance(low, dict)):
        return high
    out = dict(low)
    for key, value in high.items():
        out[key] = _merged(value, low.get(key)) if key in low else value
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = safefile.load_yaml(path, safefile.CONFIG_FILE)
    except safefile.FileRefused as exc:
        raise ConfigError(str(exc)) from None
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


# The derivations were switched like readers once (``--[no-]collector.diagnosis``,
# ``collectors: {baseline: ...}``). Those keys still work, with a warning, until
# a later release refuses them: each maps onto the setting that switches the
# derivation now (None: the baseline runs exactly when its file is set).
RETIRED_COLLECTORS: dict[str, tuple[str, str] | None] = {
    "diagnosis": ("diagnosis", "enabled"),
    "baseline": None,
}


def _retired_collectors(values: dict[str, Any]) -> list[str]:
    """Move the retired ``collectors`` keys of ``values`` onto their settings;
    the warnings to give, one line each."""
    collectors = values.get("collectors")
    if not isinstance(collectors, dict) or not collectors.keys() & RETIRED_COLLECTORS.keys():
        return []
    # Copies: the nested mappings may be the caller's (the flags, kept for reloads).
    collectors = values["collectors"] = dict(collectors)
    notes = []
    for name, target in RETIRED_COLLECTORS.items():
        if name not in collectors:
            continue
        on = collectors.pop(name)
        old = f"collectors.{name} (--[no-]collector.{name})"
        if target is None:
            if on is False and values.get("baseline_file") is not None:
                values["baseline_file"] = None
                notes.append(f"{old} is deprecated: the baseline comparison runs exactly when "
                             "baseline_file (--baseline.file) is set; leave it unset instead "
                             "(switched off as asked)")
            else:
                notes.append(f"{old} is deprecated and has no effect: the baseline "
                             "comparison runs exactly when baseline_file (--baseline.file) is "
                             "set")
            continue
        section, key = target
        new = f"{section}.{key} (--[no-]{section}.{key.replace('_', '-')})"
        node = values.get(section, {})
        if isinstance(node, dict) and key not in node:
            values[section] = {**node, key: on}
            notes.append(f"{old} is deprecated: use {new}")
        else:
            notes.append(f"{old} is deprecated and ignored: {new} is set")
    return notes


def load(flags: dict[str, Any], config_file: Path | None = None,
         known_collectors: Collection[str] | None = None) -> Settings:
    """Build the settings or raise ConfigError with one operator-facing line.

    ``known_collectors``: the collector names there are; another name under
    ``collectors`` is an error (the caller that assembles the collectors knows
    them, the configuration does not)."""
    file_values = read_config_file(config_file) if config_file else {}
    values = _merged(flags, _merged(environment_values(os.environ), file_values))
    for note in _retired_collectors(values):
        log.warning("%s", note)
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        loc, problem = safefile.validation_problem(exc)
        origin = _origin(loc, flags, file_values, config_file)
        raise ConfigError(f"{safefile.dotted(loc) or 'configuration'} from {origin}: {problem}"
                          ) from None
    if known_collectors is not None:
        unknown = sorted(set(settings.collectors) - set(known_collectors))
        if unknown:
            origin = _origin(("collectors", unknown[0]), flags, file_values, config_file)
            name = safefile.one_line(unknown[0], safefile.SHOWN_CHARS)
            raise ConfigError(f"collectors.{name} from {origin}: unknown collector "
                              f"{safefile.shown(unknown[0])}; known: "
                              + ", ".join(sorted(known_collectors)))
    return settings

__all__ = ["ConfigError", "Duration", "Settings", "load", "parse_duration"]
