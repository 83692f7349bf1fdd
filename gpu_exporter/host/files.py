"""Reading kernel text files, and the one error every reader raises for a file
it cannot understand."""

from __future__ import annotations

from pathlib import Path


class MalformedFile(ValueError):
    """A kernel file that exists but does not have the expected shape
    (truncated, an unknown format, a number that is not one)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def read_text(path: Path) -> str:
    """The whole file. /proc files are generated on read, so one read() call
    sees one consistent state."""
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def to_int(path: Path, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise MalformedFile(path, f"{text!r} is not an integer") from None


def to_float(path: Path, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MalformedFile(path, f"{text!r} is not a number") from None
