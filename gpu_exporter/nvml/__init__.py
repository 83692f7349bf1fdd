"""The NVML boundary.

Only the modules of this package import ``pynvml``, one module per area of NVML
(``adapter``: a GPU's handle and the library; ``fields``, ``samples``, ``gpm``,
``events``, ``processes``, ``mig``; ``binding``: how every call is made);
everything else sees plain Python values in base units and :class:`NvmlError`.
"""

from gpu_exporter.nvml.errors import NvmlError, Return

__all__ = ["NvmlError", "Return"]
