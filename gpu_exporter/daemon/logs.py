"""Log lines in logfmt (node_exporter's default) or JSON, one event per line."""

from __future__ import annotations

import json
import logging
import sys
import time

from gpu_exporter.facts.safetext import terminal_safe

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}


def _ts(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


def _logfmt_value(value: str) -> str:
    if value and not any(ch in value for ch in ' ="\n\t\\') and terminal_safe(value) == value:
        return value
    # Names from the node (a process's, a GPU's) may hold escape sequences:
    # every control character is written as its escape, never raw.
    quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + terminal_safe(quoted) + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        parts = [f"ts={_ts(record)}", f"level={record.levelname.lower()}",
                 f"logger={record.name}", f"msg={_logfmt_value(msg)}"]
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": _ts(record), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The log on stderr, where a line that cannot be written (a full disk,
    /dev/full) is dropped and counted, not answered with a traceback: logging's
    own answer is a traceback written to stderr, the stream that just failed.
    The exporter goes on serving (a node whose disk is full is one to watch),
    and the first line written afterwards says how many were lost."""

    lost = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.lost:
            lost, self.lost = self.lost, 0
            note = logging.makeLogRecord({
                "name": __name__, "levelno": logging.WARNING, "levelname": "WARNING",
                "msg": "%d log line(s) before this one could not be written",
                "args": (lost,)})
            super().emit(note)
            if self.lost:  # it still fails: the lines before, and this one
                self.lost = lost + 1
                return
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        self.lost += 1


def setup(level: str = "info", fmt: str = "logfmt") -> None:
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
