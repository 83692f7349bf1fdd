"""Every loader of a file the exporter reads (the config file, the web config
file, scenarios, device profiles, recordings, the node baseline) against what a
hostile or broken file holds: random bytes, a valid file cut short at every
offset, a byte changed, alias bombs, deep nesting, huge scalars, text that is
not UTF-8. Each answer is a valid result or one line naming the file (never a
traceback, never the expanded input), within a time and a memory bound.

The default run tries a fixed sample (seconds); ``GPU_EXPORTER_LONG_TESTS=1``
tries every offset and a larger random budget.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_exporter import baseline
from gpu_exporter.settings import safefile, safeyaml
from gpu_exporter.settings.config import ConfigError, load
from gpu_exporter.simulator import ScenarioError, load_profile, load_scenario
from gpu_exporter.simulator.recordings import seal
from gpu_exporter.web.webconfig import load_web_config
from tests.procs import run_cli
from tests.test_bad_files import ALIAS_BOMB, load_factor

LONG = os.environ.get("GPU_EXPORTER_LONG_TESTS") == "1"
FUZZ = settings(max_examples=400 if LONG else 30, derandomize=not LONG, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
# One load, whatever the file: far above a valid file's (milliseconds), far
# below what an expansion costs (an alias bomb ran for minutes and gigabytes).
TIME_BOUND_S = 3.0
MEMORY_BOUND_KIB = 100 * 1024

SCENARIOS = Path(__file__).resolve().parent.parent / "gpu_exporter" / "simulator"
HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()

Loader = Callable[[Path], object]


def _scenario(path: Path) -> object:
    return load_scenario(str(path))


def _profile(path: Path) -> object:
    return load_profile(str(path))


def _web_config(path: Path) -> object:
    return load_web_config(path)


def _config(path: Path) -> object:
    return load({}, path)


LOADERS: dict[str, tuple[Loader, type[Exception]]] = {
    "config": (_config, ConfigError),
    "web config": (_web_config, ConfigError),
    "scenario": (_scenario, ScenarioError),
    "profile": (_profile, ScenarioError),
    "recording": (_scenario, ScenarioError),
    "baseline": (baseline.load, ConfigError),
}
# The file name each loader is given: a scenario or profile file ends in .yaml.
NAMES = {"config": "c.yaml", "web config": "w.yml", "scenario": "s.yaml", "profile": "p.yaml",
         "recording": "r.yaml", "baseline": "b.json"}


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def outcome(kind: str, path: Path) -> str | None:
    """Load ``path`` as ``kind``: None when it loads, else its one line; the
    load held to the time and memory bounds."""
    load, refusal = LOADERS[kind]
    before, t0 = _peak_kib(), time.process_time()
    try:
        load(path)
        message = None
    except refusal as exc:
        message = str(exc)
    took, grew = time.process_time() - t0, _peak_kib() - before
    assert took < TIME_BOUND_S * load_factor(), f"{kind} {path}: {took:.2f}s"
    assert grew < MEMORY_BOUND_KIB, f"{kind} {path}: the peak RSS grew {grew} KiB"
    if message is not None:
        assert message and "\n" not in message and "Traceback" not in message, message
        # Bounded whatever the file holds: the longest line lists the 54
        # built-in scenarios (about 1,500 characters); a value is quoted cut short.
        assert len(message) < 3000 + len(str(path)), message[:300]
        assert str(path) in message or "profile" in message, message
    return message


# --- valid files of each kind ---------------------------------------------------------------
@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("valid")
    one = tmp / "one.yaml"
    one.write_text("name: one\nnode: {gpus: 1, profile: rtx-4090}\nstate: {utilization: 0.9}\n")
    rec = tmp / "rec.yaml"
    result = run_cli(["record", "--simulate", str(one), "--duration", "1s", "--out", str(rec)])
    assert result.returncode == 0, result.stderr
    config = yaml.safe_dump({
        "web": {"listen_address": ":9835", "max_requests": 4, "request_timeout": "5s"},
        "poll": {"interval": "2s", "timeout": "1s"}, "log": {"level": "info"},
        "processes": {"max_per_gpu": 8}, "collectors": {"gpm": False, "host": True},
        "diagnosis": {"window": "30s"}}).encode()
    base = {"format": baseline.FORMAT, "exporter_version": "0.1.0", "gpu_count": 1,
            "gpus": [{"index": 0, "present": True, "uuid": "GPU-1", "pcie_width_max": 16,
                      "power_limit_watts": 700.0, "persistence_mode": True}]}
    return {
        "config": config,
        "web config": (f"basic_auth_users:\n  prometheus: {HASH}\n"
                       f"  grafana: {HASH}\n").encode(),
        "scenario": (SCENARIOS / "scenarios" / "mixed.yaml").read_bytes(),
        "profile": (SCENARIOS / "profiles" / "rtx-4090.yaml").read_bytes(),
        "recording": rec.read_bytes(),
        "baseline": json.dumps(base, indent=2).encode(),
    }


def test_every_valid_file_loads(valid: dict[str, bytes], tmp_path: Path) -> None:
    for kind, data in valid.items():
        path = tmp_path / NAMES[kind]
        path.write_bytes(data)
        assert outcome(kind, path) is None, kind


def _offsets(size: int) -> Iterator[int]:
    """Where to cut a file: every offset in the long run; else every offset of
    its first and last 200 bytes and every 37th between."""
    if LONG or size <= 600:
        yield from range(size)
        return
    yield from range(200)
    yield from range(200, size - 200, 37)
    yield from range(size - 200, size)


@pytest.mark.parametrize("kind", list(LOADERS))
def test_a_file_cut_short_anywhere_loads_or_is_one_line(valid: dict[str, bytes], kind: str,
                                                        tmp_path: Path) -> None:
    data = valid[kind]
    path = tmp_path / NAMES[kind]
    loaded = []
    for n in _offsets(len(data)):
        path.write_bytes(data[:n])
        if outcome(kind, path) is None:
            loaded.append(n)
    if kind in ("recording", "baseline"):
        # Neither has a shorter form that is whole: a recording ends with its
        # checksum, a baseline's JSON with its brace.
        assert loaded == [], loaded[:10]


def test_a_recording_with_any_byte_changed_is_refused(valid: dict[str, bytes],
                                                      tmp_path: Path) -> None:
    data = valid["recording"]
    path = tmp_path / NAMES["recording"]
    step = 1 if LONG else 13
    for n in range(0, len(data), step):
        for changed in ({data[n] ^ 0x01}, {data[n] ^ 0x80}):
            path.write_bytes(data[:n] + bytes(changed) + data[n + 1:])
            assert outcome("recording", path) is not None, n


# --- random and hostile bytes ---------------------------------------------------------------
@FUZZ
@given(kind=st.sampled_from(list(LOADERS)), data=st.binary(max_size=400))
def test_random_bytes_load_or_are_one_line(kind: str, data: bytes, tmp_path: Path) -> None:
    path = tmp_path / NAMES[kind]
    path.write_bytes(data)
    outcome(kind, path)


@FUZZ
@given(kind=st.sampled_from(list(LOADERS)), data=st.data())
def test_a_valid_file_with_random_bytes_spliced_in_loads_or_is_one_line(
        valid: dict[str, bytes], kind: str, data: st.DataObject, tmp_path: Path) -> None:
    original = valid[kind]
    at = data.draw(st.integers(0, len(original)))
    cut = data.draw(st.integers(0, 8))
    spliced = original[:at] + data.draw(st.binary(min_size=1, max_size=16)) \
        + original[at + cut:]
    path = tmp_path / NAMES[kind]
    path.write_bytes(spliced)
    message = outcome(kind, path)
    if kind == "recording" and spliced != original:
        assert message is not None


def _deep(levels: int) -> bytes:
    return ("a:\n" + "".join("  " * i + "- b:\n" for i in range(1, levels))
            + "  " * levels + "c\n").encode()


HOSTILE: dict[str, bytes] = {
    "alias bomb": ALIAS_BOMB.encode(),
    "alias bomb through merge keys": (
        b"a: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8}\n" + b"".join(
            b"%c: &%c {%s}\n" % (98 + i, 98 + i, b", ".join(
                b"k%d: *%c" % (k, 97 + i) for k in range(9))) for i in range(8))),
    "recursive alias": b"a: &a [1, *a]\n",
    "deep flow nesting": b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
    "deep block nesting": _deep(200),
    "huge scalar": b"name: " + b"x" * 900_000 + b"\n",
    "huge key": b"x" * 500_000 + b": 1\n",
    "many keys": b"".join(b"k%d: %d\n" % (i, i) for i in range(100_000)),
    "long integer": b"name: " + b"9" * 5000 + b"\n",
    "NaN": b"name: .nan\n",
    "not UTF-8": b"name: \xc3\x28\n",
    "UTF-16": "name: x\n".encode("utf-16"),
    "NUL": b"name: a\x00b\n",
    "two documents": b"name: a\n---\nname: b\n",
    "python tag": b"!!python/object/apply:os.system ['true']\n",
    "a name no file can have": b"name: x\nextends: " + b"a" * 5000 + b"\n",
    "a NUL in a name": b'name: x\nextends: "a\\0b"\nnode: {profile: "p\\0.yaml"}\n',
}


@pytest.mark.parametrize("kind", list(LOADERS))
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_hostile_yaml_is_one_line_in_time_and_memory(kind: str, hostile: str,
                                                     tmp_path: Path) -> None:
    path = tmp_path / NAMES[kind]
    path.write_bytes(HOSTILE[hostile])
    message = outcome(kind, path)
    # A name of 900,000 characters is a name: bounded by the file's size.
    assert message is not None or hostile == "huge scalar", (kind, hostile)


def test_the_bounds_hold_without_libyaml_too() -> None:
    """PyYAML built without libyaml parses in Python: the same bounds apply."""
    for parser in (None, safeyaml.PurePythonParser):
        for text, problem in ((ALIAS_BOMB, "more than 100,000 values with its aliases expanded"),
                              ("a: " + "[" * 100 + "]" * 100, "nested deeper than 32 levels"),
                              ("a: &a [1, *a]", "refers to the node that holds it")):
            with pytest.raises(safefile.FileRefused) as err:
                safeyaml.parse_yaml(text, "x.yaml", safefile.CONFIG_FILE, parser)
            assert problem in str(err.value)


@pytest.mark.parametrize(("text", "nodes"), [
    # the mapping, key a, its list of 3, key b, its list of two aliases of 4 each
    ("a: &a [1, 2, 3]\nb: [*a, *a]\n", 1 + 1 + 4 + 1 + 1 + 2 * 4),
    ("a: &a {x: [1]}\nb: *a\nc: *a\n", 1 + 3 * (1 + 4)),
])
def test_an_alias_counts_every_node_it_stands_for(text: str, nodes: int) -> None:
    kind = safefile.FileKind("test file", 1000, nodes, 8)
    safeyaml.parse_yaml(text, "x", kind)
    with pytest.raises(safefile.FileRefused, match="more than"):
        safeyaml.parse_yaml(text, "x", safefile.FileKind("test file", 1000, nodes - 1, 8))


@pytest.mark.parametrize(("text", "depth"), [
    ("a: [[1]]", 4),  # the mapping, two lists, the number
    ("a: &a [[1]]\nb: {c: *a}", 5),  # the alias at depth 3 holds 3 levels
])
def test_an_alias_counts_the_depth_it_brings(text: str, depth: int) -> None:
    safeyaml.parse_yaml(text, "x", safefile.FileKind("test file", 1000, 100, depth))
    with pytest.raises(safefile.FileRefused, match=f"nested deeper than {depth - 1} levels"):
        safeyaml.parse_yaml(text, "x", safefile.FileKind("test file", 1000, 100, depth - 1))


def test_a_file_over_its_size_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"# " + b"x" * safefile.CONFIG_FILE.max_bytes + b"\n")
    assert outcome("config", path) == (f"config file {path}: larger than the 1 MiB a config "
                                       "file may be")
    scenario = tmp_path / "s.yaml"
    scenario.write_bytes(b"name: big\ndescription: " + b"x" * (5 * safefile.MIB) + b"\n")
    assert outcome("scenario", scenario) == (f"scenario {scenario}: larger than the 4 MiB a "
                                             "scenario may be")


def test_a_timeline_over_its_bound_is_refused_before_it_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: long\ntimeline:\n" + "".join(f"  - {{at: {i}}}\n" for i in range(1001)))
    assert outcome("scenario", path) == (f"scenario {path}: timeline: 1,001 steps, more than "
                                         "the 1,000 a scenario may have")


def test_a_pipe_is_read_and_a_silent_one_or_a_directory_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files read once (a node baseline, a scenario) may come through a pipe."""
    monkeypatch.setattr(safefile, "PIPE_TIMEOUT_S", 0.3)
    fifo = tmp_path / "b.json"
    os.mkfifo(fifo)
    # Nobody writes: an empty file, which is no JSON.
    assert (outcome("baseline", fifo) or "").endswith("not JSON (Expecting value)")

    def write(fd: int, pause: float, text: bytes) -> None:
        time.sleep(pause)
        os.write(fd, text)
        os.close(fd)

    for pause, text in ((0.1, b"[]"), (1.0, b"")):
        # As ``--baseline.file <(generate-baseline)`` gives it, a moment late or too late.
        read_end, write_end = os.pipe()
        writer = threading.Thread(target=write, args=(write_end, pause, text))
        writer.start()
        path = Path(f"/dev/fd/{read_end}")
        try:
            message = outcome("baseline", path)
        finally:
            writer.join()
            os.close(read_end)
        assert message is not None
        assert ("nothing came within" not in message) if text else \
            message == f"baseline file {path}: cannot read: nothing came within 0.3 s"
    assert outcome("config", tmp_path) == f"config file {tmp_path}: is a directory, not a file"


@pytest.mark.parametrize("kind", ["config", "web config"])
def test_a_file_read_again_on_reload_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    """A FIFO nobody writes to reads as empty: for the web config file that
    would be no TLS and no auth. Refused at once, written to or not."""
    fifo = tmp_path / NAMES[kind]
    os.mkfifo(fifo)
    name = "config file" if kind == "config" else "web config file"
    assert outcome(kind, fifo) == f"{name} {fifo}: is a pipe (FIFO), not a regular file"
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"{}\n")
        path = Path(f"/dev/fd/{read_end}")
        assert outcome(kind, path) == f"{name} {path}: is a pipe (FIFO), not a regular file"
    finally:
        os.close(read_end)
        os.close(write_end)
    assert outcome(kind, Path("/dev/zero")) == \
        f"{name} /dev/zero: is a character device, not a regular file"


def test_a_value_is_quoted_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("poll: {interval: '" + "x" * 100_000 + "'}\n")
    message = outcome("config", path) or ""
    assert message.startswith(f"poll.interval from config file {path}: expected a duration")
    assert len(message) < 400 + len(str(path)), message


def _deep_json(levels: int) -> Any:
    return "[" * levels + "]" * levels


def test_deep_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for levels in (17, 5000, 200_000):
        path.write_text(_deep_json(levels))
        assert "nested deeper than 16 levels" in (outcome("baseline", path) or "")


def test_a_recording_resealed_after_an_edit_is_validated(valid: dict[str, bytes],
                                                         tmp_path: Path) -> None:
    """Only the recorder writes the end line; one written after an edit still
    meets the validation of every recorded answer."""
    data = valid["recording"]
    body = data[:data.rindex(b"# end of recording")]
    path = tmp_path / NAMES["recording"]
    for old, new, problem in [
        (b"util_pct: 90", b"util_pct: .nan", "'.nan' is not a finite number"),
        (b"util_pct: 90", b"util_pct: 101", "util_pct: Input should be less than or equal to"),
        (b"polls: 2", b"polls: 3", "counted 3 by its header, 2 by its end line, 2 by its replay"),
        (b"        lost: false\n", b"", "the GPU's first poll lacks lost"),
        (b"  - t: 0.0", b"  - t: 9.0", "replay.polls.1.t: 1.0 is before the poll ahead of it"),
        (b"power_mw:", b"power_watts:", "replay.polls.0.gpus.0.power_watts: unknown field"),
    ]:
        assert old in body, old
        path.write_bytes(seal(body.replace(old, new, 1).decode(), 2).encode())
        message = outcome("recording", path) or ""
        assert problem in message, (old, message)
