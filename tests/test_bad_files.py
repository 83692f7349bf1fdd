"""Hostile files against the real exporter process: a YAML alias bomb (a few
hundred bytes that stand for a billion values) in the config file at start and
on SIGHUP, and a bad file of every kind the exporter reads, each refused in one
line with exit status 2 (docs/reliability.md, "Bad input"). Times and memory
are measured on the process itself: its exit through os.wait4 and its peak
resident memory from /proc/PID/status (VmHWM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.procs import ROOT, free_port, run_cli, start, stop_bound_s, wait_http

# Nine aliases of the level below on each of nine levels: 9**9 (387 million)
# strings once expanded, in 342 bytes.
ALIAS_BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
    for i in range(8)))
# What the exporter may take to refuse the bomb at start (the interpreter's own
# start included), and its peak resident memory meanwhile.
START_BOUND_S = 2.0
MEMORY_BOUND_KIB = 200 * 1024


def load_factor() -> float:
    """How much slower than idle this machine runs now (stop_bound_s's rule)."""
    return max(1.0, os.getloadavg()[0] / (2 * (os.cpu_count() or 1)))


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def test_the_alias_bomb_in_the_config_file_is_refused_at_start_in_time_and_memory(
        tmp_path: Path) -> None:
    assert len(ALIAS_BOMB) < 400
    config = tmp_path / "bomb.yaml"
    config.write_text(ALIAS_BOMB)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gpu_exporter", "--config.file", str(config),
                             "--web.listen-address", f"127.0.0.1:{free_port()}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    sampled = 0
    while proc.poll() is None and time.monotonic() - t0 < 30:
        sampled = max(sampled, peak_rss_kib(proc.pid))
        time.sleep(0.005)
    if proc.returncode is None:
        # Reaped here, with the kernel's own peak for the whole run.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak = max(sampled, usage.ru_maxrss)
    else:
        peak = sampled
    took = time.monotonic() - t0
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    print(f"\nalias bomb at start: exit {proc.returncode} after {took:.2f}s, peak RSS "
          f"{peak / 1024:.0f} MiB")
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == (
        f"gpu-exporter: error: config file {config}: line 6, column 8: more than 100,000 "
        "values with its aliases expanded"), err
    assert took < START_BOUND_S * load_factor(), f"took {took:.2f}s"
    assert 0 < peak < MEMORY_BOUND_KIB, f"peak RSS {peak} KiB"


def _answering(url: str) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        resp.read()
    return time.monotonic() - t0


def test_the_alias_bomb_on_sighup_keeps_the_exporter_serving_and_stopping(
        tmp_path: Path) -> None:
    config, web = tmp_path / "exporter.yaml", tmp_path / "web.yml"
    config.write_text("poll: {interval: 0.5s}\n")
    web.write_text("{}\n")  # plain HTTP, no auth: a web config file that can be reloaded
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start(["--simulate", "healthy", "--config.file", str(config), "--web.config.file",
                  str(web), "--web.listen-address", f"127.0.0.1:{port}"])
    stopped_in = None
    try:
        wait_http(f"{base}/-/ready", timeout=60)
        before = peak_rss_kib(proc.pid)
        config.write_text(ALIAS_BOMB)
        web.write_text(ALIAS_BOMB)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        # Scraped and health-checked all along the reload and after it.
        slowest = 0.0
        answered = 0
        while time.monotonic() - t0 < 2.0:
            slowest = max(slowest, _answering(f"{base}/metrics"), _answering(f"{base}/-/healthy"))
            answered += 1
            time.sleep(0.05)
        text = wait_http(f"{base}/metrics")
        assert "gpu_exporter_config_last_reload_success 0.0" in text
        peak = peak_rss_kib(proc.pid)
        print(f"\nalias bomb on SIGHUP: {answered} scrapes and health checks in 2 s, the slowest "
              f"{slowest * 1000:.0f} ms; peak RSS {before / 1024:.0f} MiB before, "
              f"{peak / 1024:.0f} MiB after")
        assert slowest < 1.0 * load_factor()
        assert peak < MEMORY_BOUND_KIB
        t1 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        stopped_in = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = proc.stderr.read()  # type: ignore[union-attr]
    print(f"SIGTERM to exit: {stopped_in:.2f}s")
    assert code == 0, log
    assert "Traceback" not in log
    refused = [line for line in log.splitlines() if "more than 100,000 values" in line]
    # One line for the config file (the running one kept), one for the web
    # config file (on SIGHUP, or on the change seen first by a request).
    assert len(refused) == 2, log
    assert any("configuration reload failed, keeping the running configuration: config file "
               f"{config}: line 6, column 8:" in line for line in refused), refused
    assert any("web config not reloaded" in line and str(web) in line for line in refused)
    assert stopped_in < stop_bound_s(), f"exit took {stopped_in:.2f}s"


# --- a bad file of every kind: one line, exit status 2 ---------------------------------------
def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A recording of a one-GPU node, 3 polls."""
    tmp_path = tmp_path_factory.mktemp("recording")
    scenario = _write(tmp_path / "one.yaml", b"name: one\nnode: {gpus: 1, profile: rtx-4090}\n"
                      b"state: {utilization: 0.9}\n")
    out = tmp_path / "node.yaml"
    result = run_cli(["record", "--simulate", str(scenario), "--duration", "2s", "--out",
                      str(out)])
    assert result.returncode == 0, result.stderr
    return out.read_bytes()


def _changed(recording: bytes, old: bytes, new: bytes) -> bytes:
    assert old in recording
    return recording.replace(old, new, 1)


def _resealed(recording: bytes, old: bytes, new: bytes) -> bytes:
    """The recording with ``old`` replaced and its end line made to match again:
    what only the validation of its content can refuse."""
    from gpu_exporter.simulator.recordings import seal

    body = _changed(recording[:recording.rindex(b"# end of recording")], old, new)
    return seal(body.decode(), int(recording.rsplit(b": ", 1)[1].split()[0])).encode()


NOT_UTF8 = b"name: caf\xe9\n"


def _cases(tmp_path: Path, rec: bytes) -> dict[str, tuple[list[str], str]]:
    port = ["--web.listen-address", "127.0.0.1:0"]
    sim = ["--simulate", "healthy", *port]

    def file(name: str, content: bytes) -> str:
        return str(_write(tmp_path / name, content))

    profile = file("p.yaml", b"name: x\xff\n")
    return {
        "non-UTF-8 config file": (
            ["--config.file", file("c.yaml", b"log: {level: d\xe9bug}\n"), *sim],
            "config file {}: line 1, column 15: not UTF-8 text (byte 0xe9)"),
        "non-UTF-8 web config file": (
            ["--web.config.file", file("w.yml", b"basic_auth_users: {\xff: x}\n"), *sim],
            "web config file {}: line 1, column 20: not UTF-8 text (byte 0xff)"),
        "non-UTF-8 scenario": (
            ["--simulate", file("s.yaml", NOT_UTF8), *port],
            "scenario {}: line 1, column 10: not UTF-8 text (byte 0xe9)"),
        "non-UTF-8 profile": (
            ["diagnose", "--simulate", file("sp.yaml", f"name: s\nnode: {{profile: {profile}}}\n"
                                            .encode())],
            f"scenario {{}}: node.profile: profile {profile}: line 1, column 8: not UTF-8 text "
            "(byte 0xff)"),
        "non-UTF-8 baseline": (
            ["baseline", "diff", "--simulate", "healthy", "--baseline",
             file("b.json", b'{"format": "\xff"}')],
            "baseline file {}: line 1, column 13: not UTF-8 text (byte 0xff)"),
        "a recording with a byte changed": (
            ["--simulate", file("r1.yaml", _changed(rec, b"util_pct: 90", b"util_pct: 99")),
             *port],
            "recording {}: corrupted: its bytes do not match the SHA-256 of its last line"),
        "a recording with a byte that is not UTF-8": (
            ["diagnose", "--simulate",
             file("r2.yaml", _changed(rec, b"lost: false", b"lost: f\xfelse"))],
            "recording {}: corrupted"),
        "a recording cut short": (
            ["diagnose", "--simulate", file("r3.yaml", rec[:1000])],
            "recording {}: cut short: its last line is not the end of a recording"),
        "a recording without its replay": (
            ["diagnose", "--simulate", file("r4.yaml", rec[:rec.index(b"replay:")])],
            "recording {}: cut short"),
        "a recording naming an unknown NVML error": (
            ["diagnose", "--simulate", file("r5.yaml", _resealed(
                rec, b"nvmlDeviceGetEccMode: NOT_SUPPORTED", b"nvmlDeviceGetEccMode: NO_SUCH"))],
            "recording {}: replay.polls.0.gpus.0.errors.nvmlDeviceGetEccMode: unknown NVML error "
            "'NO_SUCH'"),
        "a recording with utilization as a string": (
            ["diagnose", "--simulate", file("r6.yaml", _resealed(
                rec, b"util_pct: 90", b"util_pct: '90'"))],
            "recording {}: replay.polls.0.gpus.0.util_pct: Input should be a valid integer "
            "(got '90')"),
        "a recording with a GPU outside the node": (
            ["diagnose", "--simulate", file("r7.yaml", _resealed(
                rec, b"gpus:\n      0:", b"gpus:\n      99999:"))],
            "recording {}: replay.polls.0.gpus.99999: GPU 99999 is not on the node "
            "(node.gpus is 1)"),
        "a recording of another format": (
            ["diagnose", "--simulate", file("r8.yaml", _resealed(rec, b"format: 2",
                                                                 b"format: 3"))],
            "recording {}: recording.format: format 3 is not one this gpu-exporter reads"),
        "a recording of format 1": (
            ["diagnose", "--simulate", file("r9.yaml", rec[rec.index(b"name:"):
                                                           rec.index(b"# end of recording")])],
            "recording {}: a recording without a format version"),
    }


def test_a_bad_file_of_every_kind_is_one_line_and_exit_status_2(tmp_path: Path,
                                                                recording: bytes) -> None:
    cases = _cases(tmp_path, recording)
    results: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(name: str, argv: list[str]) -> None:
        results[name] = run_cli(argv)

    # Side by side: each is a process of its own that ends at once.
    threads = [threading.Thread(target=run, args=(name, argv)) for name, (argv, _) in
               cases.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, (argv, expected) in cases.items():
        result = results[name]
        lines = result.stderr.strip().splitlines()
        path = argv[argv.index("--simulate") + 1] if "--simulate" in argv else ""
        for flag in ("--config.file", "--web.config.file", "--baseline"):
            if flag in argv:
                path = argv[argv.index(flag) + 1]
        assert result.returncode == 2, (name, result.stderr)
        # The error is the last line and the only one at level error (the
        # daemon logs a line or two before it reads the web config file).
        errors = [line for line in lines
                  if line.startswith("gpu-exporter: error:") or "level=error" in line]
        assert errors == lines[-1:] and "Traceback" not in result.stderr, (name, result.stderr)
        assert lines[-1].startswith("gpu-exporter: error: " + expected.format(path)), (
            name, lines[-1])


@pytest.mark.parametrize("offset", [0, 1, 20, 60, 200])
def test_a_recording_cut_at_the_start_is_not_replayed(tmp_path: Path, recording: bytes,
                                                      offset: int) -> None:
    path = _write(tmp_path / "cut.yaml", recording[:offset])
    result = run_cli(["diagnose", "--simulate", str(path)])
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
