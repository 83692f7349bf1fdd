"""What each way of validating a file costs the exporter: sections (ours)
against pydantic (a test dependency now), measured as README's dependency
table quotes them. Each figure is the median of ``--runs`` fresh processes.

    python -m benchmarks.validation_cost [--runs 5]

- import: the RSS and wall time ``import`` adds (the stdlib both need
  already loaded);
- the settings: the exporter's settings (``config.Settings``) rebuilt as
  pydantic models field by field (type, bounds, Parse steps as before
  validators, checks as after validators, the cross-setting check), the RSS
  and time that adds, and the time to validate a file of every setting;
- errors: the one line each gives for the same bad values, as the exporter
  words it (``safefile.validation_problem``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from benchmarks.daemon_probe import ROOT

_PRELUDE = """
import json, sys, time
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:"))
import typing, dataclasses, pathlib, math, inspect, re, enum, types
"""

IMPORT = _PRELUDE + """
before = rss(); t0 = time.perf_counter()
exec(sys.argv[1])
print(json.dumps([rss() - before, (time.perf_counter() - t0) * 1e3, 0.0]))
"""

SETTINGS = _PRELUDE + """
from benchmarks.validation_cost import every_setting, pydantic_settings
from gpu_exporter.settings.config import Settings
data = every_setting()
before = rss(); t0 = time.perf_counter()
model = pydantic_settings() if sys.argv[1] == "pydantic" else Settings
built = (time.perf_counter() - t0) * 1e3; grown = rss() - before
t1 = time.perf_counter()
for _ in range(500):
    model.model_validate(data)
print(json.dumps([grown, built, (time.perf_counter() - t1) / 500 * 1e6]))
"""

BAD_VALUES: tuple[dict[str, Any], ...] = (
    {"poll": {"interval": "fast"}}, {"poll": {"interval": 0.001}},
    {"web": {"listen_address": "nowhere"}}, {"diagnosis": {"enabled": "maybe"}},
    {"web": {"max_requests": "8x"}}, {"pol": {}}, {"log": {"level": "loud"}})


def every_setting() -> dict[str, Any]:
    """A settings file that gives every setting (its default), as YAML reads it."""
    from gpu_exporter.settings.config import Settings

    data: dict[str, Any] = json.loads(json.dumps(Settings().model_dump(), default=str))
    return data


def pydantic_settings() -> Any:
    """config.Settings as pydantic models (see the module's docstring)."""
    import functools
    import operator
    import types
    import typing

    from pydantic import (
        AfterValidator,
        BeforeValidator,
        ConfigDict,
        Field,
        create_model,
        model_validator,
    )

    from gpu_exporter.settings.sections import Parse, Section

    made: dict[type, Any] = {}

    def converted(tp: Any) -> Any:
        if isinstance(tp, type) and issubclass(tp, Section):
            return mirror(tp)
        origin = typing.get_origin(tp)
        if origin is None or origin is typing.Literal:
            return tp
        args = tuple(converted(a) for a in typing.get_args(tp))
        if origin in (types.UnionType, typing.Union):
            return functools.reduce(operator.or_, args)
        return origin[args]

    def mirror(cls: type[Section]) -> Any:
        if cls in made:
            return made[cls]
        fields: dict[str, Any] = {}
        for name, spec in cls.model_fields.items():
            steps = [BeforeValidator(m.func) for m in spec.metadata if isinstance(m, Parse)]
            steps += [AfterValidator(spec.check)] if spec.check else []
            b = spec.bounds
            limits = {k: v for k, v in (("ge", b.ge), ("gt", b.gt), ("le", b.le), ("lt", b.lt),
                                        ("max_length", b.max_length)) if v is not None}
            tp = converted(spec.annotation)
            if steps:
                tp = typing.Annotated[(tp, *steps)]
            default = Field(**limits) if spec.required else \
                Field(default_factory=spec.default_factory, **limits) \
                if spec.default_factory else Field(spec.default, **limits)
            fields[name] = (tp, default)
        check = cls._check

        def cross(self: Any) -> Any:
            check(self)
            return self

        made[cls] = create_model(
            cls.__name__, __config__=ConfigDict(extra="forbid", frozen=True,
                                                arbitrary_types_allowed=True),
            __validators__={"cross": model_validator(mode="after")(cross)}, **fields)
        return made[cls]

    from gpu_exporter.settings.config import Settings
    return mirror(Settings)


def _median(code: str, arg: str, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", code, arg], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=True)
        samples.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return [statistics.median(s[i] for s in samples) for i in range(3)]


def errors() -> list[tuple[str, str]]:
    """The one line sections and pydantic each give for every bad value."""
    import pydantic

    from gpu_exporter.settings import safefile, sections
    from gpu_exporter.settings.config import Settings

    pyd = pydantic_settings()
    lines = []
    for bad in BAD_VALUES:
        said = []
        for model, error in ((Settings, sections.ValidationError),
                             (pyd, pydantic.ValidationError)):
            try:
                model.model_validate(bad)
                said.append("accepted")
            except error as exc:
                loc, problem = safefile.validation_problem(exc)
                said.append(f"{safefile.dotted(loc)}: {problem}")
        lines.append((said[0], said[1]))
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args(argv).runs
    for what, code, arg in (("import sections", IMPORT, "import gpu_exporter.settings.sections"),
                            ("import pydantic", IMPORT, "from pydantic import BaseModel"),
                            ("settings as sections", SETTINGS, "sections"),
                            ("settings as pydantic", SETTINGS, "pydantic")):
        mib, ms, us = _median(code, arg, runs)
        extra = f", validate every setting {us:.0f} us" if us else ""
        print(f"{what}: +{mib:.1f} MiB, {ms:.0f} ms{extra}")
    for ours, theirs in errors():
        print(f"sections: {ours}\npydantic: {theirs}")


if __name__ == "__main__":
    main()
