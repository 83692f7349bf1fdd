"""The state file's shape, checked as the settings are (sections: strict, frozen,
no unknown key, every string by pattern)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Literal

from gpu_exporter.diagnosis.memory_limits import (
    MAX_FAULTS_PER_GPU,
    MAX_GPUS,
    MAX_OWNER_CHARS,
    MAX_PROCESS_CHARS,
    FaultKind,
)
from gpu_exporter.host.boot import BOOT_ID
from gpu_exporter.settings.sections import Parse, SettingBounds, StrictSection, setting
from gpu_exporter.settings.sections import ValidationError as ValidationError


def _matching(pattern: str) -> Parse:
    """A text that matches ``pattern`` whole; any other type is left to the
    type's own check (a number is "not a valid string")."""
    compiled = re.compile(pattern)

    def check(value: object) -> object:
        if isinstance(value, str) and compiled.search(value) is None:
            raise ValueError(f"String should match pattern '{pattern}'")
        return value

    matches: Callable[[object], object] = check
    return Parse(matches)


_Uuid = Annotated[str, _matching(r"^GPU-[0-9A-Za-z-]{1,64}$")]
_BootId = Annotated[str, _matching(f"^{BOOT_ID.pattern}$")]
# Unix times between 2001 and 2286: a time outside is no time this file wrote.
_Time = Annotated[float, SettingBounds(ge=1e9, le=1e10)]
_Process = Annotated[str, _matching(f"^[ -~]{{0,{MAX_PROCESS_CHARS}}}$")]
_Owner = Annotated[str, _matching(f"^[ -~]{{0,{MAX_OWNER_CHARS}}}$")]


class _FaultModel(StrictSection):
    kind: FaultKind
    code: int = setting(ge=0, le=65535)  # the Xid; 0 for the other kinds
    first: _Time
    last: _Time
    count: int = setting(ge=1, le=10**9)
    boot_id: _BootId
    resets: int = setting(ge=0, le=10**6)
    # What the kernel log's line named (absent in a file from before it did).
    link: int | None = setting(None, ge=0, le=63)
    pid: int | None = setting(None, ge=0, le=2**22)
    process: _Process = ""
    owner: _Owner = ""


class _GpuModel(StrictSection):
    seen: _Time
    lost: bool
    resets: int = setting(ge=0, le=10**6)
    back: float = setting(ge=0, le=1e10)
    faults: list[_FaultModel] = setting(max_length=MAX_FAULTS_PER_GPU)


class StateModel(StrictSection):
    version: Literal[1]
    gpus: dict[_Uuid, _GpuModel] = setting(max_length=MAX_GPUS)
