"""The PCI bus id as NVML, nvidia-smi and DCGM write it, so series join across
exporters by bus id; the exporter's own joins with sysfs still match."""

from __future__ import annotations

import re

from gpu_exporter.baseline import compare
from tests.simnode import SimRun

NVML_BUS_ID = re.compile(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]")


def test_gpu_info_carries_nvmls_bus_id_and_sysfs_joins_still_match() -> None:
    # The sysfs link views are detail series.
    with SimRun("healthy", metrics={"detail": True}) as run:
        run.poll(3)
        text = run.scrape()
    ids = re.findall(r'^gpu_info\{[^}]*pci_bus_id="([^"]+)"', text, re.M)
    assert len(ids) == 8 and any(re.search("[A-F]", i) for i in ids)
    assert all(NVML_BUS_ID.fullmatch(i) for i in ids), ids
    # The PCIe collector found each GPU's device in sysfs by that id.
    gpus = set(re.findall(r'^gpu_pcie_sysfs_link_width\{[^}]*gpu="(\d)"', text, re.M))
    assert gpus == set("01234567")


def test_a_baseline_with_lower_case_bus_ids_is_no_drift() -> None:
    baseline = {"gpus": [{"index": 0, "uuid": "GPU-0", "pci_bus_id": "00000000:1a:00.0"}]}
    assert compare(baseline, {0: {"uuid": "GPU-0", "pci_bus_id": "00000000:1A:00.0"}}) == []
    moved = compare(baseline, {0: {"uuid": "GPU-0", "pci_bus_id": "00000000:1B:00.0"}})
    assert [d.field for d in moved] == ["pci_bus_id"]
