"""The state file's shape, checked by pydantic (strict, frozen, no unknown
key, every string by pattern): loaded only when a state file is set, so an
exporter that keeps no file never loads pydantic (tests/test_startup_imports.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic import ValidationError as ValidationError

from gpu_exporter.diagnosis.memory_limits import (
    MAX_FAULTS_PER_GPU,
    MAX_GPUS,
    MAX_OWNER_CHARS,
    MAX_PROCESS_CHARS,
    FaultKind,
)
from gpu_exporter.host.boot import BOOT_ID

_Uuid = Annotated[str, StringConstraints(pattern=r"^GPU-[0-9A-Za-z-]{1,64}$")]
_BootId = Annotated[str, StringConstraints(pattern=f"^{BOOT_ID.pattern}$")]
# Unix times between 2001 and 2286: a time outside is no time this file wrote.
_Time = Annotated[float, Field(ge=1e9, le=1e10)]
_Process = Annotated[str, StringConstraints(pattern=f"^[ -~]{{0,{MAX_PROCESS_CHARS}}}$")]
_Owner = Annotated[str, StringConstraints(pattern=f"^[ -~]{{0,{MAX_OWNER_CHARS}}}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _FaultModel(_Strict):
    kind: FaultKind
    code: int = Field(ge=0, le=65535)  # the Xid; 0 for the other kinds
    first: _Time
    last: _Time
    count: int = Field(ge=1, le=10**9)
    boot_id: _BootId
    resets: int = Field(ge=0, le=10**6)
    # What the kernel log's line named (absent in a file from before it did).
    link: int | None = Field(None, ge=0, le=63)
    pid: int | None = Field(None, ge=0, le=2**22)
    process: _Process = ""
    owner: _Owner = ""


class _GpuModel(_Strict):
    seen: _Time
    lost: bool
    resets: int = Field(ge=0, le=10**6)
    back: float = Field(ge=0, le=1e10)
    faults: list[_FaultModel] = Field(max_length=MAX_FAULTS_PER_GPU)


class StateModel(_Strict):
    version: Literal[1]
    gpus: dict[_Uuid, _GpuModel] = Field(max_length=MAX_GPUS)
