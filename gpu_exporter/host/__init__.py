"""Readers of the host's /proc and /sys. Each takes the root it reads from
(``--path.procfs``, ``--path.sysfs``) so the exporter works from a container
with the host's /proc mounted and the tests run on fixture trees. They return
plain dataclasses in base units and keep no state: turning counters into ratios
over an interval is the collectors' job.

Conventions shared by every reader: a source this kernel does not have raises
``FileNotFoundError``; a file that exists but cannot be understood raises
:class:`gpu_exporter.host.files.MalformedFile`.
"""
