"""Every signal the playbooks name as a cause, and the exporter reads, is read
by at least one row; every other metric of the catalog says why no row reads
it (gpu_exporter/diagnosis/table.py: Row.reads, SAME_SIGNAL, NOT_READ;
docs/diagnosis.md, "Every cause signal is read")."""

from __future__ import annotations

import pytest

from gpu_exporter.diagnosis import table as t
from gpu_exporter.poll.catalog import BY_NAME, CATALOG

READ = {metric.name for row in t.ROWS for metric in row.reads}

# What the playbooks (/work/shared/seeds at the time of writing) name as a
# cause of a slow or idle GPU, and the series the exporter keeps of it.
PLAYBOOK_CAUSES: dict[str, tuple[str, ...]] = {
    "high iowait or slow reads: the GPU waits on input": ("gpu_host_cpu_iowait_ratio",
                                                          "gpu_workload_pressure_ratio"),
    "you're swapping: the CPU is paging": ("gpu_host_swap_bytes_total",),
    "DataLoader workers preempted, fighting for CPU": (
        "gpu_process_run_queue_wait_seconds_total", "gpu_host_pressure_ratio"),
    "cgroups can introduce surprising overhead (CPU quota, memory limit)": (
        "gpu_workload_cpu_throttled_periods_total", "gpu_workload_memory_limit_bytes",
        "gpu_workload_memory_reclaimed_bytes_total"),
    "a VM's CPU time given to other guests": ("gpu_host_cpu_steal_ratio",),
    "check clocks and throttle reasons; a GPU at 300 MHz is capped": (
        "gpu_throttle_reason_active", "gpu_clock_hertz"),
    "thermal saturation; adjust fan curves": ("gpu_temperature_celsius",
                                              "gpu_fan_speed_ratio"),
    "power limits": ("gpu_power_limit_watts", "gpu_power_watts"),
    "PCIe link downtrained (x16 -> x4, Gen4 -> Gen3)": ("gpu_pcie_link_width",
                                                         "gpu_pcie_link_generation"),
    "PCIe correctable errors": ("gpu_pcie_aer_errors_total", "gpu_pcie_replays_total"),
    "ECC/Xid errors in the logs": ("gpu_ecc_errors_total", "gpu_xid_errors_total"),
    "fallen off the bus": ("gpu_up",),
    "a process on the wrong NUMA node": ("gpu_process_cpu_affinity_local",),
    "disabled persistence mode": ("gpu_persistence_mode_enabled",),
    "97 % utilization with idle SMs": ("gpu_sm_active_ratio",),
    "running out of VRAM (a MIG instance's too)": ("gpu_memory_used_bytes",
                                                   "gpu_mig_memory_used_bytes"),
    "a process stuck, not working": ("gpu_process_state",),
}


def test_every_metric_a_row_reads_is_a_metric_the_exporter_exports() -> None:
    """A row reads the catalog's own entries: the very handles the readers add
    through, not look-alikes declared beside them."""
    strays = {m.name for row in t.ROWS for m in row.reads if BY_NAME.get(m.name) is not m}
    assert not strays, strays
    assert not READ - set(BY_NAME), READ - set(BY_NAME)
    assert set(t.SAME_SIGNAL) | set(t.NOT_READ) <= set(BY_NAME)


@pytest.mark.parametrize("cause", sorted(PLAYBOOK_CAUSES))
def test_a_cause_the_playbooks_name_is_read_by_a_row(cause: str) -> None:
    unread = [m for m in PLAYBOOK_CAUSES[cause] if m not in READ]
    assert not unread, f"{cause}: no row reads {unread}"


def test_the_catalog_walk_finds_no_unread_signal_without_its_reason() -> None:
    unexplained = [m.name for m in CATALOG
                   if m.name not in READ and m.name not in t.SAME_SIGNAL
                   and m.name not in t.NOT_READ]
    assert not unexplained, ("metrics no row reads and no entry explains "
                             "(table.NOT_READ or SAME_SIGNAL): " + ", ".join(unexplained))
    # Another form of a signal counts only where a row reads that signal.
    assert {m: s for m, s in t.SAME_SIGNAL.items() if s not in READ} == {}
    # ... and a reason is never given for a metric a row does read.
    assert READ.isdisjoint(t.NOT_READ) and READ.isdisjoint(t.SAME_SIGNAL)
    assert all(reason.strip() for reason in t.NOT_READ.values())


def test_a_cause_signal_cannot_be_excused() -> None:
    named = {m for metrics in PLAYBOOK_CAUSES.values() for m in metrics}
    assert named.isdisjoint(t.NOT_READ)
