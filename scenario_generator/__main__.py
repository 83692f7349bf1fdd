"""``python -m scenario_generator [--cases N] [--seed S] [--jobs J]``: run the
generated cases on the real exporter and print recall, false findings per
case, owner accuracy, and the per-class tables (cause x board, cause x load
band; ``--cells`` for every cause x board x band cell with a miss;
``--write-docs`` writes the results into docs/diagnosis.md and every cell into
docs/diagnosis-scenarios.md). Exit status 0 when the run meets the diagnosis'
bar (recall >= 98 %, false findings <= 0.5 % of cases, every attributed
finding's owner right), 1 otherwise."""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from scenario_generator.compose import boards, cases
from scenario_generator.score import Outcome, Tally, outcome
from scenario_generator.truth import Case

RECALL_BAR, FALSE_BAR = 0.98, 0.005
ROOT = Path(__file__).resolve().parent.parent
DOCS, CELLS_PAGE = ROOT / "docs" / "diagnosis.md", ROOT / "docs" / "diagnosis-scenarios.md"
BEGIN, END = "<!-- RESULTS: written by python -m scenario_generator --write-docs -->", \
    "<!-- /RESULTS -->"
LEGEND = ("Each cell is found/expected root causes, `+n` false findings on cases of that "
          "class; a class in parentheses is a confounder (nothing expected), `-` a cell with "
          "cases and nothing to find or miss, an empty cell one the draw did not reach.")


def outcomes(seed: int, count: int, jobs: int) -> Iterator[Outcome]:
    todo: Iterable[Case] = cases(seed, count)
    if jobs <= 1:
        yield from map(outcome, todo)
        return
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        yield from pool.imap(outcome, todo, chunksize=8)


def _cell(found: int, expected: int, false: int) -> str:
    text = f"{found}/{expected}" if expected else "-"
    return text + (f" +{false}" if false else "")


def table(tally: Tally, axis: int, columns: list[str], markdown: bool) -> str:
    rows = tally.by(axis)
    body = [[name, *(_cell(*rows[name][c]) if c in rows[name] else "" for c in columns)]
            for name in sorted(rows)]
    return _render(["class", *columns], body, markdown)


def cells_table(tally: Tally) -> str:
    """Every class x board x load band: a row per class and board, a column
    per band (Markdown)."""
    bands = sorted({k[2] for k in tally.cells})
    pairs = sorted({(k[0], k[1]) for k in tally.cells})
    body = [[name, board, *(_cell(*tally.cells[(name, board, b)])
                            if (name, board, b) in tally.cells else "" for b in bands)]
            for name, board in pairs]
    return _render(["class", "board", *(f"{b:02d}" for b in bands)], body, True)


def _render(head: list[str], body: list[list[str]], markdown: bool) -> str:
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(r) + " |" for r in body]
    else:
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        for r in [head, *body]:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scenario_generator", description=__doc__)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--cells", action="store_true", help="print every cell with a miss")
    ap.add_argument("--markdown", action="store_true", help="tables as Markdown")
    ap.add_argument("--write-docs", action="store_true",
                    help=f"write the results into {DOCS.relative_to(ROOT)} (between its "
                    f"RESULTS markers) and every cell into {CELLS_PAGE.relative_to(ROOT)}")
    ap.add_argument("--write-docs-summary", action="store_true",
                    help=f"add this seed's summary line to {DOCS.relative_to(ROOT)}'s "
                    "results (another seed than the tables', as a check on unseen cases)")
    ap.add_argument("--show", type=int, default=20,
                    help="print this many cases that went wrong (default 20)")
    args = ap.parse_args(argv)
    tally = Tally()
    wrong: list[Outcome] = []
    for o in outcomes(args.seed, args.cases, args.jobs):
        tally.add(o)
        if o.missed or o.false or o.owner_wrong:
            wrong.append(o)
    print(f"python -m scenario_generator --cases {args.cases} --seed {args.seed}")
    print(tally.summary())
    print()
    print("found/expected root causes (+false findings), by class and board:")
    print(table(tally, 1, sorted(boards()), args.markdown))
    print()
    print("found/expected root causes (+false findings), by class and load band (%):")
    bands = sorted({f"{k[2]:02d}" for k in tally.cells})
    print(table(tally, 2, bands, args.markdown))
    if tally.false_kinds:
        print()
        print("false findings by what was reported (and the case's class):")
        for kind, n in tally.false_kinds.most_common():
            print(f"  {n:4d}  {kind}")
    if args.cells:
        print()
        print("cells with a miss or a false finding (class, board, band: found/expected +false):")
        for (name, board, band), (found, expected, false) in sorted(tally.cells.items()):
            if found < expected or false:
                print(f"  {name}, {board}, {band:02d}-{band + 5:02d} %: "
                      f"{_cell(found, expected, false)}")
    for o in wrong[:args.show]:
        c = o.case
        print()
        print(f"{c.name}: causes {list(c.causes)}, confounders {list(c.confounders)}, "
              f"{c.board}, {c.tenant}, {c.host}, band {c.band} %")
        for e in o.missed:
            print(f"  missed {e.describe()}")
        for f in o.false:
            print(f"  false  {f}")
        for w in o.owner_wrong:
            print(f"  owner  {w}")
        print(f"  reported: {o.reported}")
    if args.write_docs:
        write_docs(tally, args.cases, args.seed)
    if args.write_docs_summary:
        write_summary(tally, args.cases, args.seed)
    ok = (tally.recall >= RECALL_BAR and tally.false_per_case <= FALSE_BAR
          and tally.owner_right == tally.attributed)
    return 0 if ok else 1


_SECTION = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
_OTHER = re.compile(r"^    --seed (\d+) --cases \d+: .*$", re.M)


def _section() -> tuple[str, str]:
    text = DOCS.read_text(encoding="utf-8")
    found = _SECTION.search(text)
    if found is None:
        raise SystemExit(f"{DOCS}: no {BEGIN} ... {END} section to write")
    return text, found.group(0)


def _others(section: str, count: int, seed: int, tally: Tally | None) -> list[str]:
    """The section's summary lines of other seeds, with this run's when
    ``tally`` is given, ordered by seed."""
    lines = {int(m.group(1)): m.group(0) for m in _OTHER.finditer(section)}
    if tally is not None:
        lines[seed] = f"    --seed {seed} --cases {count}: {tally.summary()}"
    return [lines[k] for k in sorted(lines)]


def _write(text: str, section: str) -> None:
    DOCS.write_text(_SECTION.sub(lambda _m: section, text, count=1), encoding="utf-8")


def write_docs(tally: Tally, count: int, seed: int) -> None:
    """The run's results in docs/diagnosis.md (summary, class x board, class x
    load band, the other seeds' summaries kept) and every class x board x
    band cell in its own page."""
    command = f"python -m scenario_generator --cases {count} --seed {seed} --write-docs"
    text, old = _section()
    others = [line for line in _others(old, count, seed, None)
              if not line.startswith(f"    --seed {seed} ")]
    bands = sorted({f"{k[2]:02d}" for k in tally.cells})
    _write(text, "\n".join([
        BEGIN, "",
        f"On the table as it stands (`{command}`):", "",
        f"    {tally.summary()}", "",
        "On cases of other seeds (`--write-docs-summary`), drawn the same way: a check on "
        "cases the rules were not written from:", "",
        *(others or ["    (none yet)"]), "",
        LEGEND + " Every class x board x load band cell: "
        "[diagnosis-scenarios.md](diagnosis-scenarios.md).", "",
        "By class and board:", "",
        table(tally, 1, sorted(boards()), True), "",
        "By class and load band (%, the band's lower edge):", "",
        table(tally, 2, bands, True), "",
        END]))
    CELLS_PAGE.write_text("\n".join([
        "# The diagnosis on generated scenarios: every class x board x load band", "",
        f"Written by `{command}` (do not edit by hand); what the generator draws and how it "
        "scores: [simulator.md](simulator.md#the-scenario-generator-scenario_generator), "
        "the principles the rows follow: [diagnosis.md](diagnosis.md).", "",
        f"    {tally.summary()}", "",
        LEGEND + " Columns are load bands (%, the band's lower edge).", "",
        cells_table(tally), ""]), encoding="utf-8")


def write_summary(tally: Tally, count: int, seed: int) -> None:
    """This seed's summary line among the other seeds' in docs/diagnosis.md."""
    text, old = _section()
    lines = _others(old, count, seed, tally)
    head, sep, _rest = old.partition("cases the rules were not written from:\n\n")
    if not sep:
        raise SystemExit(f"{DOCS}: write the tables first (--write-docs)")
    tail = _rest.split("\n\n", 1)[1]
    _write(text, head + sep + "\n".join(lines) + "\n\n" + tail)


if __name__ == "__main__":
    sys.exit(main())
