"""gpu_exporter: a Prometheus exporter for NVIDIA GPU nodes that says why the GPU is slow."""

__version__ = "0.1.0"
