"""results/your-data/README.md's commands train what their run names and the text say: the
run called yacht-bbb-mixture trained the table default (a Gaussian prior) once the table defaults
came, and every run chose best.pt by the lowest validation error, as when its numbers were made."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "results" / "your-data" / "README.md"


def train_commands() -> dict[str, list[str]]:
    block = README.read_text().split("```bash", 1)[1].split("```", 1)[0]
    env: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r'([A-Z]+)="(.*)"', line)
        if m:
            env[m[1]] = m[2]
        elif line.startswith("bbb train "):
            words = shlex.split(re.sub(r"\$([A-Z]+)", lambda v: env[v[1]], line))
            out[words[words.index("--out") + 1]] = words
    return out


def test_each_run_trains_the_prior_its_name_says_and_selects_as_it_did():
    runs = train_commands()
    assert "runs/yacht-bbb-mixture" in runs and len(runs) >= 6
    for name, words in runs.items():
        assert words[words.index("--select-by") + 1] == "error", name
        if "--method" in words:  # sgd: no prior
            continue
        prior = words[words.index("--prior") + 1] if "--prior" in words else "gaussian (the table default)"
        assert prior == ("mixture" if name.endswith("-mixture") else "gaussian"), (name, prior)
