"""The words of the rows of a workload held at its I/O limit (io.max), which
``table.py`` makes into its idle and under-fed rows: like a CPU limit that
throttles a workload, a limit it runs at is the cause, not the storage
behind it. Thresholds in braces are filled from ``thresholds.py``."""

from __future__ import annotations

from gpu_exporter.catalogs import attribution

IO_LIMIT = ("its workload (its container's or Slurm job's cgroup) has an I/O limit "
            "(io.max) on a block device and its reads or writes there move at least "
            "{io_limit_used_ratio} of that limit (bytes or I/Os per second) while its own "
            "I/O pressure, where read, is at least {io_pressure_high}: the limit holds the "
            "job back, not the storage, which would serve it faster. A workload under no "
            "I/O limit, or far from it, is left to the storage rows")
IO_LIMIT_FIX = ("Raise or remove the workload's io.max limit on the device (whoever sets the "
                "pod's or job's limits set it: the runtime's or the platform's I/O policy, "
                "a systemd IOReadBandwidthMax=), or read less from it: cache the dataset in "
                "memory or stage it to a device without a limit.")
IO_LIMIT_CONFIRM = ("cat /sys/fs/cgroup/<workload cgroup>/io.max",
                    "cat /sys/fs/cgroup/<workload cgroup>/io.stat",
                    "cat /sys/fs/cgroup/<workload cgroup>/io.pressure")
IO_LIMIT_ESCALATE = ("Escalate to whoever sets the pod's or job's limits (the pod or job "
                     "named in the finding).")
IO_LIMIT_READS = (attribution.WORKLOAD_IO_LIMIT_BYTES_PER_SECOND,
                  attribution.WORKLOAD_IO_LIMIT_OPERATIONS_PER_SECOND,
                  attribution.WORKLOAD_IO_BYTES_TOTAL, attribution.WORKLOAD_IO_OPERATIONS_TOTAL,
                  attribution.WORKLOAD_PRESSURE_RATIO)

