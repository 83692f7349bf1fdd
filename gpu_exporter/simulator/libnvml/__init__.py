"""The simulated ``libnvidia-ml.so.1``, one module per area of NVML; each area
registers its C functions in ``table`` as it is imported (see ``clib``)."""
