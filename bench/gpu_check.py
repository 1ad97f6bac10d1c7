"""The GPU check (``make gpu-check``, ``bash bench/gpu_check.sh``): what a GPU machine is for, in one
command of at most ~9 minutes, from a checkout with ``PYTHONPATH=src`` and nothing installed.

1. ``tests/cuda`` (pytest): the passed and failed counts, the failing tests named.
2. The speed bench (``bench/run.py``'s children, one process each) on CUDA at 2x1200: the
   deterministic MLP (``mlp``), bbb in the paper's configuration (``bbb-paper``: scale mixture,
   Monte Carlo KL, one sample, Adam) and bayesian-torch's ``LinearReparameterization``
   (``bayesian-torch-reparam``) where it is importable (its wheel carried, bench/README.md).
3. Seconds per epoch of ``bbb train`` at 2x1200 in the paper's configuration on real MNIST (two
   epochs, the second reported), or, without MNIST, projected from the bench's steps/s; and the same
   epoch with ``--cuda-graph`` (``epoch_s_2x1200_paper_graph``) and its ratio to the deterministic
   MLP's epoch under the same capture (``ratio_vs_deterministic_graph_2x1200``; not in the dry run).
4. A population of 8 such networks under one engine against one network
   (``bench/bench_population.py``): ``population_ratio_k8_2x1200``, the population's step over one
   network's (issue 74's target: at most 2), and the same with both replayed from CUDA graphs
   (``population_ratio_k8_2x1200_graph``; not in the dry run); the eager run times the same 8 as a
   grid too (each its own prior and learning rate: ``bench_population.py --grid``):
   ``grid_ratio_k8_2x1200``, the grid's step over the population's.
5. With the time left: the engine's step of the paper's 2x1200 network with sigma and sigmoid(rho)
   stored (as the engine does) and computed again in the update (``bench/kernel_variants.py``
   ``base`` / ``recompute_sigma``, alternated twice): ``kernel_recompute_sigma_ratio``, the
   recomputing step's best median over the storing one's (below 1: recomputing pays on this
   device; a CPU's is about 1.2), and whether both trained to the same numbers.

Writes ``gpu.json`` (``device``, ``torch``, ``epoch_s_2x1200_paper``, ``ratio_vs_deterministic_2x1200``,
``speedup_vs_bayesian_torch_2x1200``, ``population_ratio_k8_2x1200``, ``cuda_tests_passed``,
``cuda_tests_failed``, then the details)
and ``gpu.md`` into ``--out``. ``--dry-run``: the same steps on the CPU at tiny sizes on random data
(bench/tests runs it, so that the check works the day a GPU comes). A step that fails or runs out
of time leaves its fields ``null`` and says why; the check itself does not fail.

``--tests-only`` runs step 1 alone (its JUnit XML kept as ``cuda-tests.xml`` in ``--out``), so that
the tests can share the device with a long run; ``--tests-from XML`` then runs the rest with the
counts read from that file (the speed steps need the device to themselves).

Example:
    PYTHONPATH=src python3 bench/gpu_check.py --out bench/results
    PYTHONPATH=src python3 bench/gpu_check.py --dry-run --out /tmp/gpu-dry
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: before torch loads

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import xml.etree.ElementTree as ET  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_population  # noqa: E402  (bench/bench_population.py: the population's child)
import run as bench  # noqa: E402  (bench/run.py: its children, data and recipes)

#: the systems of the speed part: the deterministic floor, ours in the paper's configuration, the peer
FLOOR, OURS, PEER = "mlp", "bbb-paper", "bayesian-torch-reparam"
WIDTH = 1200
#: the deterministic MLP's epoch under the same capture (``bbb train --method sgd``: no dropout, Adam
#: 1e-3, the optimiser of ``bbb-paper``'s epoch)
FLOOR_GRAPH_RECIPE: dict[str, Any] = {"method": "sgd", "optimizer": "adam", "lr": 1e-3, "cuda_graph": True}
#: networks in the population timed against one (the dry run: bench_population.py's 3)
POP_MEMBERS = 8
#: minibatches of 128 in an epoch of 50,000 MNIST training images (bench/run.py's s/epoch)
EPOCH_STEPS = 391
#: the whole check's budget in seconds (a GPU machine's command runs at most 10 minutes)
BUDGET = 530.0
#: seconds for tests/cuda at most, and for one bench child at most
CUDA_TESTS_LIMIT = 270.0
CHILD_LIMIT = 150.0
#: the engine-step variants compared (bench/kernel_variants.py), each run twice, alternated
VARIANTS = ("base", "recompute_sigma")
VARIANT_LIMIT = 60.0
_VARIANT_LINE = re.compile(r"median ([0-9.]+) ms, min ([0-9.]+) ms; sum of every mu after 45 steps (\S+)")
REQUIRED = {"device": str, "torch": str, "epoch_s_2x1200_paper": (float, type(None)),
            "ratio_vs_deterministic_2x1200": (float, type(None)),
            "speedup_vs_bayesian_torch_2x1200": (float, type(None)),
            "epoch_s_2x1200_paper_graph": (float, type(None)),
            "ratio_vs_deterministic_graph_2x1200": (float, type(None)),
            "population_ratio_k8_2x1200": (float, type(None)),
            "population_ratio_k8_2x1200_graph": (float, type(None)),
            "grid_ratio_k8_2x1200": (float, type(None)),
            "cuda_tests_passed": (int, type(None)), "cuda_tests_failed": (int, type(None))}


class Clock:
    """What is left of the budget, and the limit for the next step (never past the budget)."""

    def __init__(self, budget: float) -> None:
        self.t0, self.budget = time.perf_counter(), budget

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def limit(self, cap: float) -> float:
        return max(0.0, min(cap, self.budget - self.elapsed()))


def cuda_tests(folder: Path, limit: float, xml: Path) -> dict[str, Any]:
    """``pytest tests/cuda`` in a subprocess, its JUnit XML written to ``xml``; counts from it."""
    out = _no_tests()
    if limit < 10:
        out["cuda_tests_note"] = "not run: no time left"
        return out
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", str(folder)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        out["cuda_tests_note"] = f"timed out after {limit:.0f} s"
        return out
    seconds = round(time.perf_counter() - t, 1)
    if not xml.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        out["cuda_tests_note"] = f"pytest exited with {proc.returncode}: {tail[0][:300]}"
        return out
    out = read_junit(xml)
    out["cuda_tests_seconds"] = seconds
    if proc.returncode not in (0, 1, 5):
        out["cuda_tests_note"] = f"pytest exited with {proc.returncode}"
    return out


def _no_tests() -> dict[str, Any]:
    return {"cuda_tests_passed": None, "cuda_tests_failed": None, "cuda_tests_skipped": None,
            "cuda_tests_failing": [], "cuda_tests_seconds": None, "cuda_tests_note": None}


def read_junit(xml: Path) -> dict[str, Any]:
    """tests/cuda's counts and failing tests from a pytest JUnit XML file (its ``time``: the seconds)."""
    out = _no_tests()
    tests = failed = skipped = 0
    seconds = 0.0
    for suite in ET.parse(xml).getroot().iter("testsuite"):
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
        seconds += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                out["cuda_tests_failing"].append(f"{case.get('classname')}::{case.get('name')}")
    out.update(cuda_tests_passed=tests - failed - skipped, cuda_tests_failed=failed, cuda_tests_skipped=skipped,
               cuda_tests_seconds=round(seconds, 1))
    return out


def tiny_data(folder: Path) -> str:
    """The dry run's data: random images of MNIST's shape, with a validation split for ``bbb train``."""
    import torch

    g = torch.Generator().manual_seed(0)

    def split(n: int) -> tuple[Any, Any]:
        return torch.rand(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g)

    (tx, ty), (vx, vy), (sx, sy) = split(1024), split(128), split(128)
    path = folder / "data.pt"
    torch.save({"train_x": tx, "train_y": ty, "val_x": vx, "val_y": vy, "test_x": sx, "test_y": sy}, path)
    return str(path)


def _epoch_s(row: dict[str, Any]) -> float | None:
    """A bbb train epoch child's steady seconds per epoch, or None."""
    return float(row["seconds_per_epoch"]) if row.get("status") == "ok" and row.get("seconds_per_epoch") else None


def _ok(row: dict[str, Any] | None) -> bool:
    return bool(row) and row.get("status") == "ok" and bool(row.get("steps_per_s"))


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu ({bench.cpu_name()})"


def kernel_variants(clock: Clock, width: int, device: str, threads: int, runs: int = 2) -> dict[str, Any]:
    """``engine.step()`` medians (ms) of each of :data:`VARIANTS`, ``runs`` alternated runs each
    (``bench/kernel_variants.py``, one process a run), and whether they trained to the same numbers."""
    out: dict[str, Any] = {"status": "ok", **{v: [] for v in VARIANTS}}
    sums = set()
    for v in VARIANTS * runs:
        limit = clock.limit(VARIANT_LIMIT)
        if limit < 10:
            out["status"] = "not run: no time left" if not out[VARIANTS[0]] else "partly run: no time left"
            break
        cmd = [sys.executable, str(HERE / "kernel_variants.py"), v, "--width", str(width), "--device", device,
               "--threads", str(threads), "--prior", "paper"]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit,
                                  env={**os.environ, "BBB_COMPILE_NOTICE": "0"})
        except subprocess.TimeoutExpired:
            out.update(status="failed", detail=f"{v}: timed out after {limit:.0f} s")
            break
        m = _VARIANT_LINE.search(proc.stdout)
        if proc.returncode != 0 or m is None:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
            out.update(status="failed", detail=f"{v}: exit {proc.returncode}: {tail[0][:300]}")
            break
        out[v].append(float(m.group(1)))
        sums.add(m.group(3))
    runs = [out[v] for v in VARIANTS]
    out["ratio"] = min(runs[1]) / min(runs[0]) if all(runs) else None
    out["same_numbers"] = len(sums) == 1 if all(runs) else None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gpu_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(HERE / "results"),
                    help="folder for gpu.json and gpu.md (default bench/results)")
    ap.add_argument("--dry-run", action="store_true", help="the same steps on the CPU at tiny sizes, random data")
    ap.add_argument("--budget", type=float, default=BUDGET, help=f"seconds for the whole check (default {BUDGET:.0f})")
    parts = ap.add_mutually_exclusive_group()
    parts.add_argument("--tests-only", action="store_true",
                       help="run tests/cuda only: its JUnit XML as cuda-tests.xml in --out (e.g. beside a long "
                            "GPU run, which the speed part must not share the device with)")
    parts.add_argument("--tests-from", metavar="XML", type=Path,
                       help="tests/cuda's counts from this JUnit XML (a --tests-only run's) instead of running it")
    args = ap.parse_args(argv)
    if args.tests_from is not None and not args.tests_from.is_file():
        ap.error(f"--tests-from {args.tests_from}: no such file (a --tests-only run writes cuda-tests.xml)")
    import torch

    clock = Clock(args.budget)
    dry = args.dry_run
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("bench/gpu_check.py: error: no CUDA device here "
                         "(--dry-run checks the script on the CPU)")
    width = 16 if dry else WIDTH
    threads = 1 if dry else torch.get_num_threads()
    result: dict[str, Any] = {"device": device_name(device), "torch": str(torch.__version__)}
    with tempfile.TemporaryDirectory(prefix="bbb-gpu-check-") as tmp_:
        tmp = Path(tmp_)
        if args.tests_from is not None:
            result.update(read_junit(args.tests_from))
            result["cuda_tests_note"] = f"counts read from {args.tests_from} (run before the speed part)"
        else:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            xml = out / "cuda-tests.xml" if args.tests_only else tmp / "cuda.xml"
            result.update(cuda_tests(ROOT / "tests" / "cuda", clock.limit(CUDA_TESTS_LIMIT), xml))
            if args.tests_only:
                print(json.dumps(result, indent=1))
                print(f"wrote {xml} ({clock.elapsed():.0f} s)", file=sys.stderr)
                return 0
        if dry:
            data, source = tiny_data(tmp), "random (dry run)"
        else:
            ns = argparse.Namespace(random_data=False, data_dir=None)
            data, source = bench.prepare_data(ns, tmp)
        base = {"threads": threads, "device": device, "data": data, "batch": 128}
        speed = {"kind": "speed", "width": width, "steps": 2 if dry else 30, "repeats": 1 if dry else 3,
                 "warmup": 1 if dry else 5, "eval_images": 64 if dry else 10_000,
                 "repeat_seconds": 0.0 if dry else 2.0, "profile": 0}
        rows: dict[str, dict[str, Any]] = {}
        for system in (FLOOR, OURS, PEER):
            limit = clock.limit(CHILD_LIMIT)
            if system == PEER and importlib.util.find_spec("bayesian_torch") is None:
                rows[system] = {"system": system, "width": width, "status": "not installed",
                                "detail": "no bayesian_torch here (carry its wheel in .whl/, bench/README.md)"}
            elif limit < 10:
                rows[system] = {"system": system, "width": width, "status": "not run: no time left"}
            else:
                rows[system] = bench.run_child({**base, **speed, "system": system}, limit)
        epoch: dict[str, Any] | None = None
        if source != "random":
            limit = clock.limit(CHILD_LIMIT)
            job = {**base, "kind": "epoch", "system": OURS, "width": width, "recipe": bench.EPOCH_RECIPES[OURS],
                   "epochs": bench.EPOCHS_RUN, "train_size": 512 if dry else None}
            epoch = bench.run_child(job, limit) if limit >= 10 else {"status": "not run: no time left"}
        graph: dict[str, Any] = {"status": "not run: needs CUDA" if dry else "not run: no MNIST"}
        floor_graph: dict[str, Any] = dict(graph)
        if source != "random" and not dry:  # the same epoch with the step replayed from CUDA graphs
            limit = clock.limit(CHILD_LIMIT)
            graph = (bench.run_child({**job, "recipe": {**bench.EPOCH_RECIPES[OURS], "cuda_graph": True}}, limit)
                     if limit >= 10 else {"status": "not run: no time left"})
            limit = clock.limit(CHILD_LIMIT)  # and the deterministic MLP's, Adam 1e-3, the same capture
            floor_graph = (bench.run_child({**job, "system": FLOOR, "recipe": FLOOR_GRAPH_RECIPE}, limit)
                           if limit >= 10 else {"status": "not run: no time left"})
        limit = clock.limit(CHILD_LIMIT)
        pop_spec = {"threads": threads, "device": device, "width": width, "members": POP_MEMBERS, "dry_run": dry}
        population = (bench.run_child({**pop_spec, "grid": True}, limit, script=HERE / "bench_population.py",
                                      mark=bench_population.RESULT_MARK, ident=("width", "members"))
                      if limit >= 10 else {"status": "not run: no time left"})
        population_graph: dict[str, Any] = {"status": "not run: needs CUDA"}
        if not dry:  # both systems' steps replayed from CUDA graphs
            limit = clock.limit(CHILD_LIMIT)
            population_graph = (bench.run_child({**pop_spec, "cuda_graph": True}, limit,
                                                script=HERE / "bench_population.py",
                                                mark=bench_population.RESULT_MARK, ident=("width", "members"))
                                if limit >= 10 else {"status": "not run: no time left"})
        # (the dry run's timings mean nothing: one run of each, which still checks their numbers agree)
        variants = kernel_variants(clock, width, device, threads, runs=1 if dry else 2)
    floor, ours, peer = rows[FLOOR], rows[OURS], rows[PEER]
    epoch_s, epoch_source = None, None
    if epoch is not None and epoch.get("status") == "ok" and epoch.get("seconds_per_epoch") is not None:
        epoch_s = float(epoch["seconds_per_epoch"])
        epoch_source = (f"bbb train, epoch {bench.EPOCHS_RUN} of {bench.EPOCHS_RUN} on "
                        f"{epoch['train_images']:,} {source} images (training, validation, checkpoint)")
    elif _ok(ours):
        epoch_s = EPOCH_STEPS / float(ours["steps_per_s"])
        epoch_source = (f"projected: {EPOCH_STEPS} steps / the bench's steps/s ({source} data"
                        + ("" if epoch is None else f"; the bbb train epoch: {epoch.get('status')} "
                           f"{epoch.get('detail', '')}".rstrip()) + ")")
    result.update({
        "epoch_s_2x1200_paper": epoch_s,
        "ratio_vs_deterministic_2x1200": (float(floor["steps_per_s"]) / float(ours["steps_per_s"])
                                          if _ok(floor) and _ok(ours) else None),
        "speedup_vs_bayesian_torch_2x1200": (float(ours["steps_per_s"]) / float(peer["steps_per_s"])
                                             if _ok(ours) and _ok(peer) else None),
        "epoch_s_2x1200_paper_graph": _epoch_s(graph),
        "ratio_vs_deterministic_graph_2x1200": (_epoch_s(graph) / _epoch_s(floor_graph)  # type: ignore[operator]
                                                if _epoch_s(graph) and _epoch_s(floor_graph) else None),
        "population_ratio_k8_2x1200": (float(population["ratio"]) if population.get("status") == "ok"
                                       and population.get("ratio") else None),
        "population_ratio_k8_2x1200_graph": (float(population_graph["ratio"]) if population_graph.get("status") == "ok"
                                             and population_graph.get("ratio") else None),
        "grid_ratio_k8_2x1200": (float(population["grid_ratio"]) if population.get("status") == "ok"
                                 and population.get("grid_ratio") else None),
    })
    result.update({
        "dry_run": dry, "width": width, "data": source, "epoch_source": epoch_source,
        "bench": {k: {f: r.get(f) for f in ("status", "detail", "steps_per_s", "version", "peak_cuda_mb",
                                           "warmup_seconds", "build_seconds")}
                  for k, r in rows.items()},
        "epoch": None if epoch is None else {f: epoch.get(f) for f in ("status", "detail", "epoch_seconds",
                                                                       "train_images", "version")},
        "epoch_graph": {f: graph.get(f) for f in ("status", "detail", "epoch_seconds", "train_images")},
        "epoch_graph_deterministic": {f: floor_graph.get(f) for f in ("status", "detail", "epoch_seconds")},
        "population": {f: population.get(f) for f in ("status", "detail", "members", "width", "ratio", "one",
                                                      "population", "grid", "grid_ratio", "peak_cuda_mb")},
        "population_graph": {f: population_graph.get(f) for f in ("status", "detail", "ratio", "one", "population")},
        "kernel_recompute_sigma_ratio": variants["ratio"], "kernel_variants": variants,
        "python": sys.version.split()[0], "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "seconds": round(clock.elapsed(), 1),
        "command": " ".join(["bash bench/gpu_check.sh", *(sys.argv[1:] if argv is None else argv)]),
    })
    for key, kind in REQUIRED.items():  # the file's promise (bench/tests/test_gpu_check.py checks it too)
        assert isinstance(result[key], kind) and not isinstance(result[key], bool), (key, result[key])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "gpu.md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {out / 'gpu.json'} and {out / 'gpu.md'} ({result['seconds']:.0f} s)", file=sys.stderr)
    return 0


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def markdown(r: dict[str, Any]) -> str:
    w = r["width"]
    lines = [
        "# GPU check" + (" (dry run on the CPU: tiny sizes, meaningless numbers)" if r["dry_run"] else ""),
        "",
        f"`{r['command']}` on {r['date']}: device {r['device']}, torch {r['torch']}, Python {r['python']}; "
        f"{r['seconds']:.0f} s in all.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| seconds per 2x{w} epoch, bbb paper configuration | {_f(r['epoch_s_2x1200_paper'])} |",
        f"| seconds per 2x{w} epoch, the same with `--cuda-graph` | {_f(r['epoch_s_2x1200_paper_graph'])} |",
        f"| that epoch / the deterministic MLP's under the same capture | "
        f"{_f(r['ratio_vs_deterministic_graph_2x1200'])} |",
        f"| step time / the deterministic MLP's (`{OURS}` / `{FLOOR}`, 2x{w}, Adam) | "
        f"{_f(r['ratio_vs_deterministic_2x1200'])} |",
        f"| speed-up over bayesian-torch (`{OURS}` / `{PEER}` steps/s, 2x{w}) | "
        f"{_f(r['speedup_vs_bayesian_torch_2x1200'])} |",
        f"| population of {r['population'].get('members') or POP_MEMBERS} under one engine, step / one "
        f"network's (2x{w}) | {_f(r['population_ratio_k8_2x1200'])} |",
        f"| the same, both replayed from CUDA graphs | {_f(r['population_ratio_k8_2x1200_graph'])} |",
        f"| the population as a grid (each its own prior and learning rate), step / the population's | "
        f"{_f(r['grid_ratio_k8_2x1200'])} |",
        f"| tests/cuda passed / failed / skipped | {_f(r['cuda_tests_passed'], '{}')} / "
        f"{_f(r['cuda_tests_failed'], '{}')} / {_f(r['cuda_tests_skipped'], '{}')} |",
        "",
        f"Epoch: {r['epoch_source'] or 'not measured'}.",
    ]
    pop = r["population"]
    if pop.get("status") == "ok":
        lines.append(f"Population (`bench/bench_population.py`): {pop['members']} networks "
                     f"{pop['population']['epoch_s']:.3g} s/epoch, one network {pop['one']['epoch_s']:.3g} s/epoch.")
    else:
        lines.append(f"Population: {pop.get('status')} {pop.get('detail') or ''}".rstrip() + ".")
    kv = r.get("kernel_variants") or {}
    if kv.get("ratio") is not None:
        lines.append(f"Engine step, sigma and sigmoid(rho) recomputed / stored (`bench/kernel_variants.py`, best "
                     f"of {len(kv['base'])} medians): {kv['ratio']:.3g} "
                     f"({min(kv['recompute_sigma']):.3g} / {min(kv['base']):.3g} ms); "
                     f"the same numbers: {kv['same_numbers']}.")
    elif kv:
        lines.append(f"Engine-step variants: {kv.get('status')} {kv.get('detail') or ''}".rstrip() + ".")
    if r["cuda_tests_note"]:
        lines.append(f"tests/cuda: {r['cuda_tests_note']}.")
    if r["cuda_tests_failing"]:
        lines += ["", "Failing tests/cuda tests:", ""] + [f"- `{t}`" for t in r["cuda_tests_failing"][:30]]
    lines += ["", "| system | status | steps/s | s/epoch (391 steps) | peak CUDA MB | version |",
              "|---|---|---:|---:|---:|---|"]
    for name, row in r["bench"].items():
        sps = row.get("steps_per_s")
        status = row.get("status") or "-"
        if row.get("detail") and status != "ok":
            status += f": {row['detail']}"
        lines.append(f"| `{name}` | {status} | {_f(sps)} | {_f(None if not sps else EPOCH_STEPS / sps)} | "
                     f"{_f(row.get('peak_cuda_mb'), '{:.0f}')} | {row.get('version') or '-'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
