"""What the demo prints after start: the lines of /metrics that show a problem,
so a first-time user sees at once what the exporter noticed."""

from __future__ import annotations

import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def problems(text: str) -> list[str]:
    values: dict[tuple[str, str], float] = {}
    out: list[str] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            gpu = s.labels.get("gpu")
            if gpu is None:
                continue
            if s.name == "gpu_throttle_reason_active" and s.value == 1 and \
                    s.labels["reason"] != "gpu_idle":
                out.append(f"  GPU {gpu}: clocks held down by {s.labels['reason']}")
            elif s.name == "gpu_up" and s.value == 0:
                out.append(f"  GPU {gpu}: lost (gpu_up 0)")
            elif s.name == "gpu_ecc_errors_total" and s.value > 0 and \
                    s.labels == {**s.labels, "type": "uncorrected", "scope": "volatile"}:
                out.append(f"  GPU {gpu}: {s.value:.0f} uncorrectable ECC error(s)")
            elif s.name == "gpu_row_remap_pending" and s.value == 1:
                out.append(f"  GPU {gpu}: memory row remap pending, needs a reset")
            elif s.name in ("gpu_pcie_link_width", "gpu_pcie_link_width_max"):
                values[(s.name, gpu)] = s.value
    for (name, gpu), width in sorted(values.items()):
        top = values.get(("gpu_pcie_link_width_max", gpu))
        if name == "gpu_pcie_link_width" and top and width < top:
            out.append(f"  GPU {gpu}: PCIe link trained at x{width:.0f} of x{top:.0f}")
    return out


def main() -> int:
    url = sys.argv[1]
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = problems(text)
    print("\n".join(found) if found else "  nothing wrong on this node")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
