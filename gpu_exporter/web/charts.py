"""Small inline SVG charts of a GPU's last 15 minutes (``history.Window``) for
the node page: no script, no external asset, colours from the page's CSS
variables so dark mode needs nothing here. A chart with nothing to draw says
so in words instead of showing an empty frame. The time axis spans what was
collected so far (at least MIN_SPAN_S, at most the 15 minutes kept), so an
exporter started a minute ago draws a minute across the whole chart, not a
sliver at its right edge; both axes say their unit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_exporter.facts.safetext import html_escape
from gpu_exporter.history import WINDOW_S

WIDTH = 300.0
HEIGHT = 80.0
# At most this many points per line (History.window thins to it): a chart is
# narrower than that in pixels, and the page is rendered each poll it is read.
MAX_POINTS = 150
# The shortest time axis: a first poll or two are not stretched across it.
MIN_SPAN_S = 60.0


def span_text(seconds: float) -> str:
    """``45 s``, ``3 min``, ``15 min``: how far back a chart's axis reaches."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


@dataclass(frozen=True)
class Line:
    label: str  # in the legend, with its newest value
    values: Sequence[float | None]
    css: str  # l1, l2 (data) or ref (a limit, dashed)
    now_text: str  # the newest value as a person reads it ("412 W")


def _segments(times: Sequence[float],
              values: Sequence[float | None]) -> list[list[tuple[float, float]]]:
    """The line cut where polls did not read the value (a gap, not a dive to
    0); of a run of equal values only its ends are kept (a flat limit is two
    points, not a hundred)."""
    segments: list[list[tuple[float, float]]] = [[]]
    for t, v in zip(times, values, strict=True):
        if v is None:
            if segments[-1]:
                segments.append([])
            continue
        seg = segments[-1]
        if len(seg) >= 2 and seg[-1][1] == v and seg[-2][1] == v:
            seg[-1] = (t, v)
        else:
            seg.append((t, v))
    return [s for s in segments if s]


def chart(title: str, times: Sequence[float], now: float, lines: Sequence[Line],
          y_max: float, y_label: str) -> str:
    """One chart: the lines over the time collected (MIN_SPAN_S to 15
    minutes), y from 0 to ``y_max``; ``y_label`` says the top with its unit."""
    drawn = [(line, _segments(times, line.values)) for line in lines]
    legend = "".join(
        f'<span class="key {line.css}">{html_escape(line.label)}: '
        f"{html_escape(line.now_text)}</span>" for line in lines)
    head = f"<figcaption>{html_escape(title)}</figcaption>"
    if not any(segs for line, segs in drawn if line.css != "ref"):
        return (f'<figure class="chart">{head}<p class="nodata">No readings in the last '
                f"15 minutes.</p></figure>")
    span = min(max(now - times[0], MIN_SPAN_S), WINDOW_S)
    t0 = now - span
    top = y_max if y_max > 0 else 1.0

    def xy(t: float, v: float) -> str:
        x = (t - t0) / span * WIDTH
        y = HEIGHT - min(max(v / top, 0.0), 1.05) * HEIGHT
        return f"{max(x, 0.0):.1f},{y:.1f}"

    shapes = []
    for line, segs in drawn:
        for seg in segs:
            if len(seg) == 1:  # one poll: a dot, since a line needs two
                x, y = xy(*seg[0]).split(",")
                shapes.append(f'<circle class="{line.css}" cx="{x}" cy="{y}" r="1.5"/>')
            else:
                pts = " ".join(xy(t, v) for t, v in seg)
                shapes.append(f'<polyline class="{line.css}" points="{pts}"/>')
    back = span_text(span)
    label = html_escape(f"{title}, last {back}, 0 to {y_label}")
    svg = (f'<svg viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}" preserveAspectRatio="none" '
           f'role="img" aria-label="{label}"><rect class="frame" x="0" y="0" '
           f'width="{WIDTH:.0f}" height="{HEIGHT:.0f}"/>{"".join(shapes)}</svg>')
    axis = (f'<div class="axis"><span>&minus;{back}</span><span>0 to {html_escape(y_label)}'
            "</span><span>now</span></div>")
    return f'<figure class="chart">{head}{svg}{axis}<div class="legend">{legend}</div></figure>'
