"""The log stays one a person can scan: every commit from the named
starting commit on has a subject of at most 72 characters and says why in
its body (a merge of a branch says what it merges, which is its why).

Commits before START were made before the rule and are left as they are.
A checkout without its history (an unpacked archive, a shallow clone that
does not reach START) skips, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.procs import ROOT

START = "ab8d762ebc3e1e2eed7eb2d8be8d703fa4d7981a"
SUBJECT_MAX = 72


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False, timeout=60)


def problems(repo: Path, start: str) -> list[str]:
    """What breaks the habits in the commits made after ``start``, whether
    on this branch or on one merged since; git's own subject (%s: the first
    paragraph) is the one measured."""
    since = git(repo, "log", "-1", "--format=%ct", start).stdout.strip()
    out = git(repo, "log", f"{start}..HEAD", f"--since={since}",
              "--format=%H%x00%P%x00%s%x00%b%x1e")
    assert out.returncode == 0, out.stderr
    found = []
    for record in out.stdout.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        sha, parents, subject, body = record.split("\x00", 3)
        if len(subject) > SUBJECT_MAX:
            found.append(f"{sha[:12]}: subject of {len(subject)} characters: {subject}")
        if len(parents.split()) < 2 and not body.strip():
            found.append(f"{sha[:12]}: no body saying why: {subject}")
    return found


def test_subjects_are_short_and_bodies_say_why() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here (an unpacked archive)")
    if git(ROOT, "cat-file", "-e", f"{START}^{{commit}}").returncode != 0:
        pytest.skip(f"the history does not reach the starting commit {START[:12]} "
                    "(a shallow clone)")
    found = problems(ROOT, START)
    assert not found, "\n".join(found)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_long_subject_or_a_missing_why_is_found(tmp_path: Path) -> None:
    env = ("-c", "user.name=t", "-c", "user.email=t@example.invalid")

    def commit(message: str) -> str:
        assert git(tmp_path, *env, "commit", "-q", "--allow-empty", "-m", message
                   ).returncode == 0
        return git(tmp_path, "rev-parse", "HEAD").stdout.strip()

    assert git(tmp_path, "init", "-q").returncode == 0
    start = commit("Start\n\nThe first.")
    commit("A subject of exactly seventy-two characters, which is the most allowed.\n\nWhy.")
    commit("x" * 73 + "\n\nWhy.")
    commit("No body")
    found = problems(tmp_path, start)
    assert len(found) == 2, found
    assert "subject of 73 characters" in found[1] and "no body saying why" in found[0]
