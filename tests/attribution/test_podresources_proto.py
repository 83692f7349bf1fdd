"""The committed PodResources modules are what the pinned generator makes
from the committed proto, and the proto is the kubelet's v1 wire contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu_exporter.attribution.podresources_v1 import api_pb2, api_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("gpu_exporter/attribution/podresources_v1")
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def test_committed_modules_match_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-podresources.py"),
                    "--out", str(tmp_path)], check=True, capture_output=True)
    stale = [name for name in GENERATED
             if (tmp_path / PACKAGE / name).read_bytes() != (ROOT / PACKAGE / name).read_bytes()]
    assert stale == [], ("regenerate with: .venv/bin/python scripts/gen-podresources.py "
                         f"(differs: {stale})")


def test_the_service_and_field_numbers_are_the_kubelets() -> None:
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    # The method path on the wire is /<package>.<service>/<method>.
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} >= {"List", "GetAllocatableResources"}
    numbers = {name: {f.name: f.number for f in api_pb2.DESCRIPTOR.message_types_by_name[
        name].fields} for name in ("ListPodResourcesResponse", "PodResources",
                                   "ContainerResources", "ContainerDevices",
                                   "AllocatableResourcesResponse")}
    assert numbers == {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4,
                               "dynamic_resources": 5},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
        "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
    }
    assert hasattr(api_pb2_grpc, "PodResourcesListerStub")
