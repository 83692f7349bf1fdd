"""``python -m scenario_generator [--cases N] [--seed S] [--jobs J]``: run the
generated cases on the real exporter and print recall, false findings per
case, owner accuracy, and the per-class tables (cause x board, cause x load
band; ``--cells`` for every cause x board x band cell). Exit status 0 when the
run meets the diagnosis' bar (recall >= 98 %, false findings <= 0.5 % of
cases, every attributed finding's owner right), 1 otherwise."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Iterable, Iterator

from scenario_generator.compose import boards, cases
from scenario_generator.score import Outcome, Tally, outcome
from scenario_generator.truth import Case

RECALL_BAR, FALSE_BAR = 0.98, 0.005


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
    head = ["class", *columns]
    lines = []
    body = [[name, *(_cell(*rows[name][c]) if c in rows[name] else "" for c in columns)]
            for name in sorted(rows)]
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
    ok = (tally.recall >= RECALL_BAR and tally.false_per_case <= FALSE_BAR
          and tally.owner_right == tally.attributed)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
