"""The NVML boundary.

``adapter`` is the only module in the project that imports ``pynvml``; everything
else sees plain Python values in base units and :class:`NvmlError`.
"""

from gpu_exporter.nvml.errors import NvmlError, Return

__all__ = ["NvmlError", "Return"]
