"""The numbers ``--help`` states (the demo's time, the quick budget's time, the paper budget's
candidates per cell) are the numbers README.md and docs/ state: one source each
(:mod:`bbb.cli.timings`, and the recipes for the candidates), so that they cannot disagree."""

from __future__ import annotations

import re
from pathlib import Path

from bbb.cli.entry import command_parser
from bbb.cli.timings import DEMO_MINUTES, LORA_MINUTES, QUICK_BUDGET_MINUTES
from bbb.experiments.mnist import BUDGETS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: the pages a reproduction wrote and the results' own, which state the paper budget's count too
RESULT_PAGES = [ROOT / "results" / "mnist-paper" / "table1.md", ROOT / "results" / "mnist-paper" / "README.md"]


def _help(*argv: str) -> str:
    parser = command_parser(argv[0])[1]
    if len(argv) > 1:  # a sub-command (reproduce mnist)
        sub = next(a for a in parser._actions if a.choices and argv[1] in a.choices)  # noqa: SLF001
        parser = sub.choices[argv[1]]
    return " ".join(parser.format_help().split())


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_paper_budget_counts_its_candidates():
    spec = BUDGETS["paper"]
    from bbb.experiments.mnist import cell_candidates

    counts = {len(cell_candidates(spec, m, w)) for m in ("sgd", "dropout", "bbb_gaussian", "bbb_mixture")
              for w in (400, 800, 1200)}
    assert spec.candidates_per_cell() == f"{min(counts)}-{max(counts)}"
    assert "{candidates_per_cell}" not in spec.description
    assert f"{spec.candidates_per_cell()} candidates per cell" in spec.description


def test_help_states_the_one_source():
    assert f"about {DEMO_MINUTES} minutes on 2 cores" in _help("demo")
    reproduce = _help("reproduce", "mnist")
    assert f"quick (about {QUICK_BUDGET_MINUTES} minutes on 2 CPU cores)" in reproduce
    assert f"{BUDGETS['paper'].candidates_per_cell()} candidates per cell" in reproduce
    lora = " ".join(_help("reproduce", "lora").split())
    assert f"about {LORA_MINUTES} minutes on 2 CPU cores with --workers 2" in lora


def test_readme_states_the_demo_and_budget_times_of_the_help():
    readme = (ROOT / "README.md").read_text()
    demo = readme.split("## The main job", 1)[1].split("\n## ", 1)[0]
    assert f"about {DEMO_MINUTES} minutes on 2 CPU cores" in " ".join(demo.split())
    quick = [line for line in readme.splitlines() if "quick budget" in line]
    assert quick and all(f"about {QUICK_BUDGET_MINUTES} minutes" in line for line in quick), quick


def other_numbers(text: str) -> list[str]:
    """The demo times and candidates-per-cell counts of ``text`` that differ from the help's."""
    text = " ".join(text.split())
    cands = BUDGETS["paper"].candidates_per_cell()
    bad = [m.group(0) for m in re.finditer(r"(\d+(?:-\d+)?) candidates per cell", text) if m.group(1) != cands]
    demo = r"(?:bbb|make) demo\b(?:[^.]|\.\d){0,200}?(?:about|in) \**(\d+(?:-\d+)?) minutes"
    return bad + [m.group(0) for m in re.finditer(demo, text) if m.group(1) != DEMO_MINUTES]


def test_the_check_finds_a_number_that_differs():
    text = ("`bbb demo` trains a 2x400 (pi = 0.25) in about 5 minutes on 2 cores. The paper budget: 1-5 "
            f"candidates per cell. `make demo`: in {DEMO_MINUTES} minutes.")
    found = other_numbers(text)
    assert len(found) == 2 and found[0] == "1-5 candidates per cell" and found[1].endswith("about 5 minutes"), found


def test_no_page_states_other_numbers():
    """Every demo time and candidates-per-cell count in README.md, docs/ and the paper budget's
    results (table1.md, written by --report, had kept an older count) is the help's."""
    bad = [f"{path.name}: {s!r}" for path in [*DOCS, *RESULT_PAGES] for s in other_numbers(path.read_text())]
    assert not bad, "a number the help states differently (bbb.cli.timings, recipes.json):\n" + "\n".join(bad)
