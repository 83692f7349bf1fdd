"""config_types' value types for the pydantic models that run beside the daemon
(the simulator's scenarios and recordings, the web config file, the
generators' settings): a duration is read as ``Duration`` reads it in the
daemon's own settings (``"1m30s"``, ``500ms``, ``2``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from gpu_exporter.config_types import parse_duration

Duration = Annotated[float, BeforeValidator(parse_duration)]

__all__ = ["Duration"]
