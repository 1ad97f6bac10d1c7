"""The commands that README.md, docs/, results/ and bench/ show run from a fresh clone.

* No command presents a folder of the machine that ran it (``/work/...``, ``/tmp/...``, a home,
  a checkout's neighbour such as ``../shared/data``): a path relative to the repository or a
  placeholder (``$OUT``, ``$BBB_DATA``) said once. Recorded ``config.json`` files and logs of past
  runs keep what they recorded; they are not commands and are not read here.
* Every ``pip install`` line in README.md and docs/ installs something that exists: a path (``.``,
  ``'.[plots]'``), a wheel the repository builds (``dist/*.whl``), a file of requirements or
  constraints, or a distribution published in the package index, which this test confirms by its
  being installed in the environment that runs it (``importlib.metadata``; no network). A line that
  names the package under a name not yet published (``pip install bayes-by-backprop``) fails.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: the markdown a user reads for commands
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "results").rglob("*.md"),
                   *(ROOT / "bench").rglob("*.md")])

#: a folder of one machine: an absolute path under a machine's roots, or a neighbour of the checkout
MACHINE_PATH = re.compile(r"(?<![\w.$/-])(/(?:work|tmp|root|home|Users|mnt|scratch|srv|data)/[\w.~-]|"
                          r"\.\./shared/)")


def code_spans(text: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block line, indented block line and inline code span of
    a markdown text: where a reader looks for a command."""
    out: list[tuple[int, str]] = []
    fenced = False
    previous_blank = True
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or (line.startswith("    ") and previous_blank and not line.lstrip().startswith(("-", "*", "|"))):
            out.append((n, line))
            continue
        previous_blank = not line.strip() or (previous_blank and line.startswith("    "))
        out += [(n, m.group(1)) for m in re.finditer(r"`([^`]+)`", line)]
    return out


def machine_paths(text: str) -> list[str]:
    return [f"line {n}: {code.strip()}" for n, code in code_spans(text) if MACHINE_PATH.search(code)]


def test_the_check_sees_a_machine_path_in_each_kind_of_code():
    text = ("Run `bbb demo --out /tmp/demo`.\n\n    BBB_DATA=/work/shared/data bbb train\n\n"
            "```bash\nbbb train --data-dir ../shared/data\nbbb train --out runs/x --data-dir $BBB_DATA\n```\n"
            "A folder of the paper (/work/x) in prose is not a command; `git show 86c2d0c:a/b > ck/b` is fine.\n")
    found = machine_paths(text)
    assert [f.split(":")[0] for f in found] == ["line 1", "line 3", "line 6"], found


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_command_names_a_folder_of_the_machine_that_ran_it(path: Path):
    found = machine_paths(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)} shows a machine's folder in a command; use a path relative to "
                       "the repository or a placeholder ($OUT, $BBB_DATA) said once:\n" + "\n".join(found))


# ------------------------------------------------------------------------------------------------
# pip install lines

#: the markdown whose install lines a new user copies (issue 56)
INSTALL_DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: pip options followed by a value that is not a requirement (a file, an index, a folder)
VALUE_OPTIONS = {"-c", "--constraint", "-r", "--requirement", "-i", "--index-url", "--extra-index-url", "-f",
                 "--find-links", "-t", "--target", "--prefix", "--root", "--python-version", "--platform",
                 "--implementation", "--abi", "--src", "--upgrade-strategy", "--progress-bar", "--log",
                 "--cache-dir", "--proxy", "--retries", "--timeout", "--trusted-host", "--cert", "--client-cert",
                 "--no-binary", "--only-binary", "--config-settings", "-C", "--global-option"}
PROJECT = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def install_targets(code: str) -> list[str]:
    """What each ``pip install`` in a line of code installs (requirements and paths, not options)."""
    out: list[str] = []
    for m in re.finditer(r"pip3? install\b([^#;&|]*)", code):
        try:
            words = shlex.split(m.group(1))
        except ValueError:
            words = m.group(1).split()
        skip = False
        for w in words:
            if skip:
                skip = False
            elif w in VALUE_OPTIONS:
                skip = True
            elif w in ("-e", "--editable") or w.startswith("-"):
                continue
            else:
                out.append(w)
    return out


def _published(name: str) -> bool:
    """Installed here from a package index: a distribution of that name whose installer recorded
    no direct URL (a local path, a VCS or a file URL: ``direct_url.json``, PEP 610). The project
    itself, installed from its checkout, is not evidence of its publication."""
    if PROJECT is not None and re.sub(r"[-_.]+", "-", name).lower() == PROJECT.group(1).lower():
        return False
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return False
    return dist.read_text("direct_url.json") is None


def unavailable(target: str) -> str | None:
    """Why ``pip install TARGET`` cannot work on a fresh machine today, or None where it can."""
    if target.startswith((".", "/", "~", "$")) or "/" in target or target.endswith((".whl", ".tar.gz", ".zip")):
        return None  # a path: the clone (``.``, ``'.[plots]'``), a built wheel (``dist/*.whl``)
    m = NAME.match(target)
    if m is None:
        return f"{target!r} is neither a path nor a package name"
    if not _published(m.group(1)):
        return f"{m.group(1)!r} is not a package this environment confirms as published"
    return None


def install_problems(text: str) -> list[str]:
    return [f"line {n}: pip install {t}: {why}" for n, code in code_spans(text) for t in install_targets(code)
            if (why := unavailable(t)) is not None]


def test_the_install_check_fails_an_unpublished_distribution_and_passes_paths_and_published_ones():
    block = ("```bash\npip install bayes-by-backprop                # not published\n"
             "pip install '.[plots]' -c torch-pin.txt\npip install -e '.[dev]'\n"
             "pip install dist/bayes_by_backprop-*.whl\n"
             "pip install torch --index-url https://download.pytorch.org/whl/cpu\n```\n"
             "Or `pip install 'bayes-by-backprop[ray]'` and `pip install no-such-dist-xyz && bbb demo`.\n")
    found = install_problems(block)
    assert [f.split(":")[0] for f in found] == ["line 2", "line 8", "line 8"], found
    assert "'bayes-by-backprop'" in found[0] and "'no-such-dist-xyz'" in found[2]
    line = "pip install -q --no-deps -c c.txt \"x==1\" ./y  # or: pip install z"
    assert install_targets(line) == ["x==1", "./y", "z"]


@pytest.mark.parametrize("path", INSTALL_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_install_line_installs_something_that_exists(path: Path):
    found = install_problems(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)}: an install line a new user cannot run today (install from the "
                       "clone, '.[extra]', or the wheel it builds):\n" + "\n".join(found))
