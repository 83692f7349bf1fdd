"""Command line: ``gpu-exporter [flags]`` runs the daemon; subcommands do
one-off jobs. Every usage or configuration error is one line on stderr and exit
status 2, never a traceback."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from gpu_exporter import __version__
from gpu_exporter.settings.config import (
    RETIRED_COLLECTORS,
    ConfigError,
    Settings,
    flag_settings,
    load,
)

PROG = "gpu-exporter"
EXIT_USAGE = 2
# Standard output refused a write: 2, as every refusal of these commands, and
# never 1, which diagnose gives for warnings (a failed write is no verdict).
EXIT_OUTPUT = 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

log = logging.getLogger(PROG)


class UsageError(Exception):
    pass


class OutputError(Exception):
    """Standard output refused what a command wrote (a full disk, /dev/full).
    Not an OSError: argparse drops an OSError from writing --help silently,
    and the command would end 0 with nothing written."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.strerror or str(exc))


class _CheckedOutput:
    """Standard output that turns a failed write into OutputError, so every
    subcommand's output (print, sys.stdout.write, argparse's --help) is
    checked in one place. A reader that went away (BrokenPipeError) is left
    as it is: that ends the command quietly."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _one_line(message: str) -> str:
    """An argument or value may hold line breaks: the error stays one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(_one_line(message))


def _epilog() -> str:
    # The subcommands named from the table that runs them: none left out.
    return (f"Subcommands: {', '.join(SUBCOMMANDS)} (each has --help). Every flag can also be "
            "set in the --config.file YAML (--web.listen-address is web: {listen_address: "
            "...}) or as GPU_EXPORTER_WEB__LISTEN_ADDRESS.")


def _daemon_parser() -> _Parser:
    from gpu_exporter.daemon.pipeline import COLLECTORS

    p = _Parser(prog=PROG, description="Prometheus exporter for NVIDIA GPU nodes that says "
                "why the GPU is slow.", allow_abbrev=False,
                epilog=_epilog())
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("--config.file", dest="config_file", metavar="FILE", type=Path,
                   help="YAML configuration file.")
    # Each from its setting's declaration (config.py): name, help and default.
    for setting in flag_settings():
        if setting.boolean:
            p.add_argument(setting.flag, dest=setting.key, help=setting.help,
                           action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS)
        else:
            p.add_argument(setting.flag, dest=setting.key, metavar=setting.metavar,
                           help=setting.help, default=argparse.SUPPRESS)
    for name, kind in COLLECTORS.items():
        # --collector.X and --no-collector.X, both shown in --help.
        p.add_argument(f"--collector.{name}", dest=f"collectors.{name}",
                       action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                       help=f"Enable or disable the {name} collector: {kind.flag_help()}")
    for name in RETIRED_COLLECTORS:
        # Still accepted, with a warning (see config.RETIRED_COLLECTORS); not shown.
        p.add_argument(f"--collector.{name}", dest=f"collectors.{name}",
                       action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                       help=argparse.SUPPRESS)
    return p


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def parse_settings(argv: Sequence[str]) -> Settings:
    return settings_loader(argv)()


def settings_loader(argv: Sequence[str]) -> Callable[[], Settings]:
    """Loads the settings from these flags, the environment and the config
    file, now and again on reload (raises ConfigError)."""
    ns = vars(_daemon_parser().parse_args(argv))
    config_file = ns.pop("config_file", None)
    flags = _nest(ns)
    from gpu_exporter.daemon.pipeline import COLLECTORS

    return lambda: load(flags, config_file, known_collectors=COLLECTORS)


def _run_daemon(argv: Sequence[str]) -> int:
    from gpu_exporter.daemon import exporter as daemon
    from gpu_exporter.daemon import logs

    load_settings = settings_loader(argv)
    settings = load_settings()
    logs.setup(settings.log.level, settings.log.format)
    simulation = None
    if settings.simulate:
        # Loaded only when asked for: a daemon on real GPUs never imports it.
        from gpu_exporter.simulator import ScenarioError, SimulatedNode

        try:
            simulation = SimulatedNode.from_name(settings.simulate)
        except ScenarioError as exc:
            raise ConfigError(str(exc)) from None
        log.info("simulating scenario %s: %s", _shortened(simulation.scenario.name),
                 _shortened(" ".join(simulation.scenario.description.split())))
    try:
        return daemon.run(settings, simulation, load_settings)
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or (exc.errno is not None and exc.errno < 0):
            # The resolver's codes (EAI_*) are negative; socket.create_server
            # passes them on in a plain OSError.
            reason = (exc.strerror or str(exc)).split(" (while attempting")[0]
            raise ConfigError(f"web.listen_address {settings.web.listen_address}: cannot "
                              f"resolve the host: {reason}") from None
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise ConfigError(f"web.listen_address {settings.web.listen_address}: address "
                              "already in use (is another exporter running?)") from None
        if exc.errno == 13:
            raise ConfigError(f"web.listen_address {settings.web.listen_address}: permission "
                              "denied (ports below 1024 need privileges)") from None
        if exc.errno == 99:
            raise ConfigError(f"web.listen_address {settings.web.listen_address}: cannot "
                              "assign that address on this host") from None
        raise


# How much of a scenario's name and description the daemon's log repeats.
LOGGED_CHARS = 300


def _shortened(text: str) -> str:
    return text if len(text) <= LOGGED_CHARS else f"{text[:LOGGED_CHARS]}... ({len(text):,} " \
        "characters)"


def _scenarios(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.scenarios import main as scenarios_main

    return scenarios_main(argv, _Parser)


def _catalog(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.catalog import main as catalog_main

    return catalog_main(argv, _Parser)


def _record(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.recording import main as record_main

    return record_main(argv, _Parser)


def _baseline(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.baseline import main as baseline_main

    return baseline_main(argv, _Parser)


def _diagnose(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.diagnose import main as diagnose_main

    return diagnose_main(argv, _Parser)


def _fleet(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.fleet import main as fleet_main

    return fleet_main(argv, _Parser)


def _slurm_health(argv: Sequence[str]) -> int:
    from gpu_exporter.commands.slurm_health import main as slurm_health_main

    return slurm_health_main(argv, _Parser)


SUBCOMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "scenarios": _scenarios,
    "catalog": _catalog,
    "diagnose": _diagnose,
    "baseline": _baseline,
    "record": _record,
    "fleet": _fleet,
    "slurm-health": _slurm_health,
}


def _end_on_termination() -> None:
    """A one-shot command stopped by SIGTERM or SIGHUP unwinds as on Ctrl-C,
    so its simulated node's files (/dev/shm, the temp dir) are removed."""
    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGHUP, stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    stdout = sys.stdout
    sys.stdout = _CheckedOutput(stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = stdout


def _say(line: str) -> None:
    """One line on stderr, if stderr takes it (it may be the full device)."""
    with contextlib.suppress(OSError):
        print(f"{PROG}: error: {_one_line(line)}", file=sys.stderr, flush=True)


def _main(args: list[str]) -> int:
    try:
        if args and args[0] in SUBCOMMANDS:
            _end_on_termination()
            # A one-shot command says what went wrong itself, once: the log of
            # the exporter it runs (NVML's retry text, a GPU falling off the
            # bus in a scenario) is the daemon's voice, not the command's.
            logging.disable(logging.ERROR)
            code = SUBCOMMANDS[args[0]](args[1:])
            sys.stdout.flush()  # a reader that went away is found here, not at exit
            return code
        return _run_daemon(args)
    except (UsageError, ConfigError) as exc:
        _say(str(exc))
        return EXIT_USAGE
    except OutputError as exc:
        # What was not written is dropped (the interpreter would try again at
        # exit and print a traceback): nothing more can reach that stream.
        _discard_stdout()
        _say(f"cannot write the output: {str(exc).lower()}")
        return EXIT_OUTPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpu-exporter scenarios | head -3`): end quietly,
        # as a command ended by SIGPIPE does, with nothing left to flush.
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _discard_stdout() -> None:
    """Standard output, from here on, is /dev/null: what is left in its
    buffer is flushed there at exit, not to a stream that refused it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # pragma: no cover - no stdout at all
        pass
