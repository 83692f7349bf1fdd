"""The image and its release: hadolint on the Dockerfile, the image's user,
healthcheck and context, and the workflow that builds and pushes it."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib

import yaml

from gpu_exporter.daemon.exporter import Exporter
from gpu_exporter.simulator import SimulatedNode
from tests import simnode
from tests.deploy_files import (
    DEFAULT_PORT,
    DEPLOY,
    ROOT,
    by_kind,
    container,
    dockerfile,
    final_stage,
    release_image,
    release_steps,
    release_workflow,
    venv_tool,
)
from tests.procs import free_port

# --- Dockerfile ----------------------------------------------------------------




def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run([venv_tool("hadolint"), "--no-color", str(ROOT / "Dockerfile")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_dockerfile_is_multi_stage_slim_python_and_builds_the_wheel_first() -> None:
    instructions = dockerfile()
    args = dict(a.split("=", 1) for w, a in instructions if w == "ARG" and "=" in a)
    froms = [a for w, a in instructions if w == "FROM"]
    assert len(froms) >= 2
    for base in froms:
        image = base.split()[0].replace("${PYTHON_VERSION}", args["PYTHON_VERSION"])
        assert re.fullmatch(r"python:3\.12-slim(-\w+)?", image), image
    assert froms[0].lower().endswith("as build")
    starts = [i for i, (w, _) in enumerate(instructions) if w == "FROM"]
    build = instructions[starts[0]:starts[1]]
    assert any(w == "RUN" and "pip wheel" in a for w, a in build)
    assert any(w == "COPY" and a.startswith("--from=build") for w, a in final_stage())


def test_image_runs_the_console_script_as_a_numeric_non_root_user() -> None:
    stage = final_stage()
    users = [a for w, a in stage if w == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert [json.loads(a) for w, a in stage if w == "ENTRYPOINT"] == [["gpu-exporter"]]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "gpu-exporter" in pyproject["project"]["scripts"]


def test_image_takes_nvml_from_the_host_driver() -> None:
    stage = final_stage()
    env = " ".join(a for w, a in stage if w == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env.split()
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env.split()
    text = (ROOT / "Dockerfile").read_text()
    # Never baked in: no driver library copied or installed.
    assert "libnvidia-ml" not in text.replace("libnvidia-ml.so.1) is not in the image", "")
    assert not re.search(r"apt-get install[^\n]*nvidia", text)


def test_image_exposes_the_default_port_and_carries_oci_labels() -> None:
    stage = final_stage()
    assert [a for w, a in stage if w == "EXPOSE"] == [str(DEFAULT_PORT)]
    labels = " ".join(a for w, a in stage if w == "LABEL")
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels


def healthcheck_command() -> list[str]:
    (check,) = [a for w, a in final_stage() if w == "HEALTHCHECK"]
    command = json.loads(check[check.index("CMD") + 3:].strip())
    assert isinstance(command, list)
    return [str(part) for part in command]


def test_healthcheck_asks_healthy_with_python_and_fails_when_nobody_answers() -> None:
    command = healthcheck_command()
    assert command[0] == "python" and "urllib.request" in command[2]
    assert f"127.0.0.1:{DEFAULT_PORT}/-/healthy" in command[2]
    # Run the image's check as is, against an exporter on a free port.
    port = free_port()
    code = command[2].replace(f":{DEFAULT_PORT}/", f":{port}/")
    exporter = Exporter(simnode.settings(web={"listen_address": f"127.0.0.1:{port}"}),
                        SimulatedNode.from_name("healthy"))
    exporter.start()
    try:
        healthy = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30,
                                 check=False)
    finally:
        exporter.stop()
    assert healthy.returncode == 0, healthy.stderr
    nobody = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30,
                            check=False)
    assert nobody.returncode != 0


def dockerignore_includes(path: str) -> bool:
    """Whether ``path`` (relative to the context) reaches the build: the last
    pattern that matches it or a folder above it decides."""
    included = True
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            included = negate
    return included


def test_dockerignore_sends_the_sources_and_nothing_else() -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    sent = {p for p in listed if dockerignore_includes(p)}
    assert {"pyproject.toml", "README.md", "gpu_exporter/cli.py"} <= sent
    assert all(p in {"pyproject.toml", "README.md"} or p.startswith("gpu_exporter/")
               for p in sent), sorted(sent)
    assert not dockerignore_includes("gpu_exporter/__pycache__/cli.cpython-312.pyc")
    assert not dockerignore_includes(".venv/bin/python")
    # Everything the wheel is built from is sent: the packages, their data, the readme.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in pyproject["tool"]["setuptools"]["packages"]:
        assert dockerignore_includes(package.replace(".", "/") + "/__init__.py"), package
    assert dockerignore_includes(pyproject["project"]["readme"])
    copied = [a.split()[:-1] for w, a in dockerfile() if w == "COPY" and "--from" not in a]
    assert sorted(p for sources in copied for p in sources) == \
        ["README.md", "gpu_exporter", "pyproject.toml"]


# --- the release workflow ------------------------------------------------------


def test_the_release_workflow_builds_both_platforms_from_the_dockerfile_on_a_tag() -> None:
    workflow = release_workflow()
    # PyYAML reads the key `on` as True (YAML 1.1).
    trigger = workflow[True]
    assert set(trigger) == {"push"} and set(trigger["push"]) == {"tags"}
    assert all(pattern.startswith("v") for pattern in trigger["push"]["tags"])
    steps = release_steps()
    build = steps["docker/build-push-action"]["with"]
    assert build["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    assert build["push"] is True
    assert (ROOT / build["context"] / build["file"]).resolve() == ROOT / "Dockerfile"
    assert "arm64" in steps["docker/setup-qemu-action"]["with"]["platforms"]
    assert "docker/setup-buildx-action" in steps
    login = steps["docker/login-action"]["with"]
    assert login["registry"] == "ghcr.io" == release_image().split("/")[0]
    assert login["password"] == "${{ secrets.GITHUB_TOKEN }}"
    (job,) = workflow["jobs"].values()
    assert job["permissions"]["packages"] == "write"
    # Tags from the git tag: v0.1.0 pushes 0.1.0, the form of the chart's appVersion.
    meta = steps["docker/metadata-action"]["with"]
    assert meta["images"] == "${{ env.IMAGE }}"
    assert "type=semver,pattern={{version}}" in meta["tags"].split()
    assert build["tags"] == "${{ steps.meta.outputs.tags }}"
    assert "VERSION=${{ steps.meta.outputs.version }}" in build["build-args"]
    assert any(w == "ARG" and a.startswith("VERSION=") for w, a in final_stage())


def test_every_action_of_the_release_workflow_is_pinned_to_a_version() -> None:
    (job,) = release_workflow()["jobs"].values()
    for step in job["steps"]:
        if "uses" in step:
            assert re.fullmatch(r"[\w-]+/[\w-]+@v\d+\.\d+\.\d+", step["uses"]), step["uses"]


def test_the_manifests_run_the_image_the_release_workflow_pushes() -> None:
    chart = yaml.safe_load((DEPLOY / "helm" / "gpu-exporter" / "Chart.yaml").read_text())
    assert container()["image"] == f"{release_image()}:{chart['appVersion']}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert chart["appVersion"] == pyproject["project"]["version"]
    kustomization = by_kind("Kustomization")
    assert kustomization["images"] == [{"name": release_image(), "newTag": chart["appVersion"]}]



