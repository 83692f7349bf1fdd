"""Generated files the repository shows at two paths, committed once.

The Helm chart may read only files inside its folder, so the rules and the
dashboards are written there; alerts/ and grafana/ (where a user without Helm
finds them, and where the compose stack mounts them from) hold relative links
to those files. Two committed copies could drift, or be edited at one path
and regenerated over at the other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def _link_text(link: Path, target: Path) -> str:
    return os.path.relpath(target, link.parent)


def link_problems(links: Mapping[Path, Path], root: Path) -> list[str]:
    """Each link (relative to ``root``) that is missing, a file of its own
    or pointing elsewhere than its target."""
    problems = []
    for link, target in links.items():
        path = root / link
        if not path.is_symlink():
            problems.append(f"{link}: not a link to {target}")
        elif os.readlink(path) != _link_text(link, target):
            problems.append(f"{link}: links to {os.readlink(path)}, not {target}")
    return problems


def write_links(links: Mapping[Path, Path], root: Path) -> list[Path]:
    """Make each link point at its target (replacing a file or a wrong link);
    return those it changed."""
    changed = []
    for link, target in links.items():
        path = root / link
        text = _link_text(link, target)
        if path.is_symlink() and os.readlink(path) == text:
            continue
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(text, target_is_directory=(root / target).is_dir())
        changed.append(link)
    return changed
