"""The exporter's configuration: one model of sections, filled from (highest first)
command-line flags, ``GPU_EXPORTER_*`` environment variables, the YAML file
given with ``--config.file``, and defaults.

One naming rule links the three: the flag ``--web.listen-address`` is the YAML
key ``web: {listen_address: ...}`` and the variable
``GPU_EXPORTER_WEB__LISTEN_ADDRESS``. A bad value is reported as one line naming
the setting, where it came from and what is wrong.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from gpu_exporter.facts.cadence import DEFAULT_POLL_INTERVAL_S
from gpu_exporter.settings import safefile
from gpu_exporter.settings.config_types import (
    AT_START,
    DEFAULT_KMSG_PATH,
    DEFAULT_POD_RESOURCES_SOCKET,
    Duration,
    Flag,
    check_telemetry_path,
    format_duration,
    kmsg_file_problem,
    parse_duration,
    parse_listen_address,
)
from gpu_exporter.settings.sections import FieldSpec, Section, ValidationError, setting
from gpu_exporter.settings.thresholds import DiagnosisConfig

log = logging.getLogger(__name__)


class ConfigError(Exception):
    """A configuration problem, already worded for the operator (one line)."""


ENV_PREFIX = "GPU_EXPORTER_"
DEFAULT_LISTEN_ADDRESS = ":9835"
# The ``GPU_EXPORTER_*`` variables that are not settings, each with what reads
# it. Any other variable with the prefix must name a setting: a misspelt one
# (``GPU_EXPORTER_WEB_LISTEN_ADDRESS``, one underscore) would otherwise leave
# its setting at the default without a word.
NOT_SETTINGS: dict[str, str] = {
    "GPU_EXPORTER_ARGS": "the flags the systemd unit passes (deploy/systemd)",
    "GPU_EXPORTER_LONG_TESTS": "the test suite: run the long forms of its tests",
    "GPU_EXPORTER_MOCKNVML": "the tests and benchmarks: where NVIDIA's mock NVML is",
    "GPU_EXPORTER_REQUIRE_TOOLS": "the tests: a missing test tool fails, not skips",
    "GPU_EXPORTER_SCREENSHOTS": "the node page's browser test: where screenshots go",
}


def _path_or_off(v: str) -> str:
    """A path setting that "" switches off: absolute, and no NUL byte."""
    if v and not v.startswith("/"):
        raise ValueError("must be an absolute path (or empty to switch it off)")
    if "\0" in v:
        raise ValueError("must not contain a NUL byte")
    return v


def _kmsg_path(v: str) -> str:
    """The kernel log: the kmsg device or a regular file where there is a
    file (a node without one counts NVML's events alone, and says so)."""
    _path_or_off(v)
    if not v:
        return v
    try:
        st = os.stat(v)
    except OSError:
        # Not there, or not to be looked at: the reader says which, as a state.
        return v
    problem = kmsg_file_problem(st.st_mode, st.st_rdev)
    if problem is not None:
        raise ValueError(problem)
    return v


def _listen_address(v: str) -> str:
    parse_listen_address(v)
    return v


class WebConfig(Section):
    listen_address: Annotated[str, Flag("ADDR")] = setting(
        DEFAULT_LISTEN_ADDRESS, check=_listen_address,
        description="Address to listen on, host:port or :port")
    telemetry_path: Annotated[str, Flag("PATH")] = setting(
        "/metrics", check=check_telemetry_path,
        description="Path under which metrics are served")
    config_file: Annotated[Path | None, Flag("FILE", name="--web.config.file")] = setting(
        None, description="Web config file (TLS, basic auth) in the Prometheus "
        "exporter-toolkit format")
    max_requests: Annotated[int, Flag("N")] = setting(
        8, ge=1, le=256, description="Most password checks (basic auth) waiting at once; "
        "beyond it a request waits a second, then is answered 503, so a flood of wrong "
        "passwords is slowed")
    request_timeout: Annotated[Duration, Flag("DURATION")] = setting(
        10.0, gt=0, description="How long a client may take to send a request head, from its "
        "first byte (from the accept on a new connection); then the connection is closed")
    idle_timeout: Annotated[Duration, Flag("DURATION")] = setting(
        300.0, gt=0, description="How long a kept-alive connection may wait for its next "
        "request")
    max_connections: Annotated[int, Flag("N")] = setting(
        1024, ge=2, le=1_000_000, description="Most open connections; at the limit the one "
        "idle the longest is closed to make room")


class PollConfig(Section):
    interval: Annotated[Duration, Flag("DURATION")] = setting(
        DEFAULT_POLL_INTERVAL_S, ge=0.05, le=3600,
        description="Time between polls of GPUs and host")
    # Past it the GPU's series are absent and gpu_up is 0 until the call returns.
    timeout: Annotated[Duration, Flag("DURATION")] = setting(
        2.0, gt=0, le=600, description="How long one GPU's NVML reads may take before it "
        "counts as hung and is skipped until they return")


class LogConfig(Section):
    level: Annotated[Literal["debug", "info", "warn", "warning", "error"], Flag("LEVEL")] = \
        setting("info", description="One of debug, info, warn, error")
    format: Annotated[Literal["logfmt", "json"], Flag("FORMAT")] = setting(
        "logfmt", description="logfmt or json")


class PathConfig(Section):
    procfs: Annotated[Path, Flag("PATH")] = setting(
        Path("/proc"), description="Mount point of the host's /proc")
    sysfs: Annotated[Path, Flag("PATH")] = setting(
        Path("/sys"), description="Mount point of the host's /sys")
    kmsg: Annotated[str, Flag("PATH")] = setting(
        DEFAULT_KMSG_PATH, check=_kmsg_path, description="The kernel log device (the kmsg "
        "character device, 1:11, or a regular file in its format), read for "
        "the driver's Xid lines since boot (Xids before the exporter started, the process of "
        "each Xid) and NVSwitch SXids; reading it needs CAP_SYSLOG or kernel.dmesg_restrict=0, "
        "and without them the exporter says so once and goes on; an empty value switches it off")
    # Off by default: two exporters (or a test run) sharing one default path
    # would mix their GPUs' pasts; the chart mounts a hostPath and sets it.
    state_file: Annotated[str, Flag("PATH")] = setting(
        "", check=_path_or_off, description="A file in which the exporter remembers each GPU's "
        "hardware faults (Xids, uncorrectable ECC errors, row remaps, lost GPUs) across "
        "restarts and reboots, such as /var/lib/gpu-exporter/state.json on a hostPath: a fault "
        "from before a restart stays a finding, and one that comes back on the same GPU after "
        "a reset or reboot is a finding of its own; its directory must be writable; empty "
        "(the default): remembered only while the exporter runs")


class ProcessesConfig(Section):
    max_per_gpu: Annotated[int, Flag("N")] = setting(
        32, ge=0, le=4096,
        description="Most GPU processes exported per GPU, largest memory first")


class MetricsConfig(Section):
    # The catalog marks the detail families (``detail``).
    detail: Annotated[bool, Flag()] = setting(
        False, description="Also export the detail series: per-link NVLink counters, the "
        "min/mean/max of NVML's sub-second samples, GPM byte rates, the last poll's ratios "
        "that a counter carries too, and the host series node_exporter already exports, "
        "beyond the series budget")


class KubernetesConfig(Section):
    pod_resources_socket: Annotated[str, Flag("PATH")] = setting(
        DEFAULT_POD_RESOURCES_SOCKET, check=_path_or_off, description="The kubelet's "
        "PodResources socket, read for the pod, namespace and container each GPU is allocated "
        "to; attribution is off while no socket is there, and an empty value switches it off")


class Settings(Section):
    web: Annotated[WebConfig, AT_START] = setting(
        WebConfig(), description="The HTTP server")
    poll: PollConfig = setting(PollConfig(), description="How often and how long to poll")
    log: LogConfig = setting(LogConfig(), description="The exporter's log")
    path: Annotated[PathConfig, AT_START] = setting(
        PathConfig(), description="Where the host's /proc and /sys are mounted")
    processes: ProcessesConfig = setting(ProcessesConfig(), description="GPU processes")
    metrics: MetricsConfig = setting(MetricsConfig(), description="What is exported")
    kubernetes: Annotated[KubernetesConfig, AT_START] = setting(
        KubernetesConfig(), description="Which pod holds each GPU")
    diagnosis: DiagnosisConfig = setting(
        DiagnosisConfig(), description="The diagnosis: its switch, window and thresholds")
    baseline_file: Annotated[Path | None, Flag("FILE", name="--baseline.file"), AT_START] = \
        setting(None, description="Node baseline (from `gpu-exporter baseline capture`) to "
              "compare every poll with; drifts are exported as gpu_baseline_drift")
    collectors: dict[str, bool] = setting(
        default_factory=dict, description="Readers switched on or off by name "
        "(--[no-]collector.<name>); each has its own default")
    simulate: Annotated[str | None, Flag("NAME|FILE"), AT_START] = setting(
        None, description="Run on simulated GPUs: a built-in scenario name (see "
        "`gpu-exporter scenarios`) or a scenario YAML file")

    def collector_enabled(self, name: str, default: bool) -> bool:
        return self.collectors.get(name, default)


# --- what follows from the declarations above ---------------------------------


@dataclass(frozen=True)
class FlagSetting:
    """A setting that is a flag, as the command line, --help and the README's
    table show it: all derived from its Field."""

    key: str  # dotted: web.listen_address
    flag: str  # --web.listen-address
    metavar: str
    help: str  # the description with its default
    boolean: bool  # --X and --no-X

    @property
    def environment(self) -> str:
        return ENV_PREFIX + self.key.replace(".", "__").upper()


def shown_default(value: object, metavar: str) -> str | None:
    """A default as --help shows it (None: there is none to show)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if metavar == "DURATION" and isinstance(value, int | float):
        return format_duration(float(value))
    return str(value)


def _leaves(model: type[Section], prefix: str = "") -> list[tuple[str, FieldSpec]]:
    out: list[tuple[str, FieldSpec]] = []
    for name, info in model.model_fields.items():
        key = prefix + name
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, Section):
            out += _leaves(annotation, key + ".")
        else:
            out.append((key, info))
    return out


def settings_fields() -> list[tuple[str, FieldSpec]]:
    """Every setting (dotted key, its Field), in the model's order."""
    return _leaves(Settings)


def flag_settings() -> list[FlagSetting]:
    """The settings that are flags, in the model's order."""
    out = []
    for key, info in settings_fields():
        flag = next((m for m in info.metadata if isinstance(m, Flag)), None)
        if flag is None:
            continue
        shown = shown_default(info.get_default(call_default_factory=True), flag.metavar)
        text = info.description or ""
        out.append(FlagSetting(
            key, flag.name or "--" + key.replace("_", "-"), flag.metavar,
            f"{text} (default {shown})." if shown is not None else f"{text}.",
            info.annotation is bool))
    return out


# A setting named by reading it: ``lambda s: s.path.procfs``. Typed, so a
# misspelled setting is a type error, and its dotted key follows (setting_key).
Selector = Callable[[Settings], object]


class _Key:
    """Stands in for the settings while a Selector runs: records the path it
    reads, and refuses a name the model does not have."""

    def __init__(self, model: type[Section] | None, path: tuple[str, ...]) -> None:
        self._model = model
        self._path = path

    def __getattr__(self, name: str) -> _Key:
        info = self._model.model_fields.get(name) if self._model is not None else None
        if info is None:
            raise AttributeError(f"no setting {'.'.join((*self._path, name))}")
        sub = info.annotation
        return _Key(sub if isinstance(sub, type) and issubclass(sub, Section) else None,
                    (*self._path, name))


def setting_key(select: Selector) -> str:
    """The dotted key of the setting ``select`` reads (``path.procfs``)."""
    key = select(cast(Settings, _Key(Settings, ())))
    if not isinstance(key, _Key):
        raise TypeError("a setting selector must return the setting it reads")
    return ".".join(key._path)


def at_start() -> tuple[str, ...]:
    """The top-level settings a reload cannot apply (they take effect at the next start)."""
    return tuple(name for name, info in Settings.model_fields.items()
                 if AT_START in info.metadata)


# The environment is read here rather than through pydantic-settings: the
# naming rule is one line, and the library with its providers (cloud secret
# stores, dotenv, TOML) cost every node about 1.5 MiB of memory.


def _takes_json(model: type[Section], path: list[str]) -> bool:
    """Whether the setting at ``path`` holds a section, a mapping or a list:
    its variable's value is JSON then (``GPU_EXPORTER_COLLECTORS='{"device":
    false}'``), as it is a plain string for a single value."""
    annotation: Any = model
    for part in path:
        if not (isinstance(annotation, type) and issubclass(annotation, Section)):
            return False  # below a mapping (collectors.<name>): a single value
        field = annotation.model_fields.get(part)
        if field is None:
            return False  # an unknown setting: reported as such by validation
        annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return True
    origin = typing.get_origin(annotation)
    return origin in (dict, list, tuple, set, frozenset) or annotation in (dict, list, tuple)


def environment_names() -> list[str]:
    """Every variable name that sets something: each setting's, each
    section's (its JSON), and those in NOT_SETTINGS."""
    names = set(NOT_SETTINGS)
    for key, _ in settings_fields():
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            names.add(ENV_PREFIX + "__".join(parts[:n]).upper())
    return sorted(names)


def _names_a_setting(path: list[str]) -> bool:
    """Whether the variable's path leads to a setting (or into a mapping
    setting such as ``collectors``, whose keys are checked when it is
    validated)."""
    model: Any = Settings
    for part in path:
        if part == "":
            return False
        if not (isinstance(model, type) and issubclass(model, Section)):
            return typing.get_origin(model) is dict or model is dict
        field = model.model_fields.get(part)
        if field is None:
            return False
        model = field.annotation
    return True


def _unknown_variable(name: str) -> ConfigError:
    # Compared without the prefix every name shares, which would make any
    # name look near the shortest.
    suffixes = {n[len(ENV_PREFIX):]: n for n in environment_names()}
    near = difflib.get_close_matches(name[len(ENV_PREFIX):].upper(), suffixes, n=1,
                                     cutoff=0.6)
    hint = f"; did you mean {suffixes[near[0]]}?" if near else \
        " (a setting's variable joins its section and name with two underscores, as " \
        "GPU_EXPORTER_WEB__LISTEN_ADDRESS; see gpu-exporter --help)"
    key = name[len(ENV_PREFIX):].lower().replace("__", ".")
    return ConfigError(f"{safefile.one_line(key, safefile.SHOWN_CHARS)} from environment "
                       f"variable {safefile.one_line(name, safefile.SHOWN_CHARS)}: unknown "
                       f"setting{hint}")


def environment_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``GPU_EXPORTER_*`` variables give, nested: sections are
    joined by two underscores (``GPU_EXPORTER_WEB__LISTEN_ADDRESS`` is
    ``web.listen_address``), names in any case. A variable that names no
    setting and is not in NOT_SETTINGS is a ConfigError that names the
    nearest valid variable."""
    out: dict[str, Any] = {}
    # A section's JSON first, then its finer variables over it (a prefix sorts first).
    for name in sorted(environ, key=str.upper):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        if name.upper() in NOT_SETTINGS:
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        if not _names_a_setting(path):
            raise _unknown_variable(name)
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
    # Loaded here, not with this module: a node started without a config file
    # does not hold PyYAML (about 1 MiB).
    from gpu_exporter.settings import safeyaml

    try:
        data = safeyaml.load_yaml(path, safefile.CONFIG_FILE)
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
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]  # an item of a list (diagnosis.hardware_xids.0)
            else:
                return False
        return True

    if has(flags):
        flag = {s.key: s.flag for s in flag_settings()}.get(dotted)
        if flag is None and loc[0] == "collectors" and len(loc) == 2:
            flag = f"--collector.{loc[1]}"
        return f"flag {flag or '--' + dotted.replace('_', '-')}"
    # The variable of the value, or of the section or list (its JSON) that holds it.
    for end in range(len(loc), 0, -1) if has(environment_values(os.environ)) else ():
        env = ENV_PREFIX + "__".join(str(p) for p in loc[:end]).upper()
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
