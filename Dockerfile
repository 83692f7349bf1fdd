# syntax=docker/dockerfile:1
#
# gpu-exporter: a slim image that runs as an unprivileged user.
#
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container toolkit
# mounts the host driver's copy, which must match the kernel module anyway.
#
#   docker build -t gpu-exporter .
#   docker run -d --gpus all --pid host -v /proc:/host/proc:ro -v /sys:/host/sys:ro \
#     -p 9835:9835 gpu-exporter --path.procfs /host/proc --path.sysfs /host/sys
#
# Released images: ghcr.io/gpu-exporter/gpu-exporter (.github/workflows/release.yml,
# linux/amd64 and linux/arm64). The Kubernetes DaemonSet runs this image as
# user 0 with every capability dropped, for the kubelet's root-only
# PodResources socket; the image's own user stays 10001 for docker run.
#
# Without a GPU: docker run --rm -p 9835:9835 gpu-exporter --simulate healthy

ARG PYTHON_VERSION=3.12

# --- build: the wheel, then a virtual environment holding it and its dependencies.
FROM python:${PYTHON_VERSION}-slim-bookworm AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpu_exporter ./gpu_exporter

RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && python -m venv /opt/gpu-exporter \
    && /opt/gpu-exporter/bin/pip install --no-cache-dir /wheels/*.whl

# --- runtime: the interpreter, the virtual environment, nothing else.
FROM python:${PYTHON_VERSION}-slim-bookworm

ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPU nodes that says why the GPU is slow" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# A numeric user that owns nothing in the image; Kubernetes' runAsNonRoot can
# verify a number, not a name. No home, no shell.
RUN groupadd --system --gid 10001 gpu-exporter \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gpu-exporter

COPY --from=build /opt/gpu-exporter /opt/gpu-exporter

# utility: NVML and nvidia-smi, no CUDA libraries; all: every GPU of the node.
ENV PATH=/opt/gpu-exporter/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

USER 10001:10001
EXPOSE 9835

# Slim images have no curl: ask with Python. This checks the default address;
# with another --web.listen-address, or TLS or auth in --web.config.file, use
# --health-cmd or --no-healthcheck (docs/deploy.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:9835/-/healthy', timeout=4).status != 200)"]

ENTRYPOINT ["gpu-exporter"]
CMD []
