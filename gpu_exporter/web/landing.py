"""The landing page's GPU table: each GPU and its state in plain words."""

from __future__ import annotations

import html

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.snapshot import Snapshot


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f} %"


def gpu_table(snap: Snapshot | None) -> str:
    if snap is None:
        return "<p>Waiting for the first poll.</p>"
    gpus = snap.readings.gpus
    if gpus is None:
        return "<p>The device collector is switched off: no GPU is read.</p>"
    if not gpus:
        return "<p>No GPUs are being read (see gpu_exporter_nvml_up and the log).</p>"
    wrong: dict[int, list[str]] = {}
    for f in snap.derived(FINDINGS) or ():
        wrong.setdefault(f.gpu, []).append(
            f'<span class="{"bad" if f.row.severity == "critical" else "warn"}">'
            f"{html.escape(f.row.summary)}</span>")
    owners = snap.readings.attribution.owners if snap.readings.attribution else {}
    rows = []
    for r in sorted(gpus.values(), key=lambda g: g.index):
        # Pod, namespace and container names come from the kubelet, job ids
        # from cgroup paths: escaped like every other external string.
        owner = "<br>".join(html.escape(o.describe()) for o in owners.get(r.index, ())) or "-"
        state = '<span class="ok">up</span>' if r.up else '<span class="bad">lost</span>'
        mem = "-"
        if r.memory_used_bytes is not None and r.memory_total_bytes:
            mem = f"{r.memory_used_bytes / 2**30:.1f} / {r.memory_total_bytes / 2**30:.1f} GiB"
        power = "-" if r.power_watts is None else f"{r.power_watts:.0f} W"
        temp = "-" if r.temperature_celsius is None else f"{r.temperature_celsius:.0f} °C"
        link = "-"
        if r.pcie_generation is not None and r.pcie_width is not None:
            link = f"Gen{r.pcie_generation} x{r.pcie_width}"
        rows.append(
            f"<tr><td>{r.index}</td><td>{html.escape(r.name)}</td><td>{state}</td>"
            f"<td>{_pct(r.utilization)}</td><td>{mem}</td><td>{power}</td><td>{temp}</td>"
            f"<td>{link}</td><td>{owner}</td>"
            f"<td>{'<br>'.join(wrong.get(r.index, [])) or 'nothing'}</td></tr>")
    return ("<h2>GPUs</h2><table><tr><th>GPU</th><th>Name</th><th>State</th>"
            "<th>Utilization</th><th>Memory</th><th>Power</th><th>Temperature</th>"
            "<th>PCIe</th><th>Owner</th><th>What is wrong</th></tr>" + "".join(rows)
            + "</table>")
