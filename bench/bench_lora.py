"""Cost of Bayesian LoRA (issue 63, item 8): a GPT-2-small-sized model from config (12 layers,
768 wide, about 124M parameters; no download), LoRA r = 8 on the attention (``c_attn``).

Systems, each measured in a child process of its own (no state shared between them):

* ``lora``: peft LoRA, the model's own causal-LM loss, ``torch.optim.AdamW`` on the adapters;
* ``bayes_a`` / ``bayes_ab``: the same peft model through ``bbb.bayesianize`` (Bayesian A only,
  BLoB's choice, or A and B), ``bbb.ELBO`` (KL over the adapters) and ``torch.optim.AdamW``;
* ``full``: the plain model converted whole by ``bbb.bayesianize`` (every weight Bayesian), the
  ELBO and AdamW on everything (the cost LoRA avoids).

Per system: the training step (forward, loss, backward, optimiser step; median over ``--repeats``
repeats of ``--steps`` steps after ``--warmup``), the peak tensor memory of one training step
(see ``--help``: on CUDA ``torch.cuda.max_memory_allocated``; on the CPU every tensor storage
counted by a ``TorchDispatchMode`` from its creation until it is freed, plus the parameters,
buffers and optimiser state alive before the step), and the prediction cost: one forward of the
LoRA model against ``bbb.uncertainty.predict`` with the posterior mean and with k samples.
Results: ``<out>/<stem>.json`` and ``<stem>.md``. Wall-clock numbers need quiet cores (or a GPU).

    python bench/bench_lora.py --out bench/results --threads 2               # the measurement
    python bench/bench_lora.py --device cuda --out bench/results --stem lora-cuda
    python bench/bench_lora.py --tiny --out /tmp/lora-bench                  # a smoke run (seconds)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

__all__ = ["SYSTEMS", "main", "measure"]

SYSTEMS = ("lora", "bayes_a", "bayes_ab", "full")
RESULT_MARK = "BENCH_LORA_RESULT "


def _tensor_memory_mode() -> Any:
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class TensorMemory(TorchDispatchMode):
        """Peak bytes of live tensor storages while active: each storage an op returns is counted
        once, from its first appearance until it is freed (checked after every op); ``seed``
        storages (parameters, optimiser state) are counted from the start."""

        def __init__(self, seed: list[Any]) -> None:
            super().__init__()
            self.live: dict[int, tuple[Any, int]] = {}
            self.current = 0
            for t in seed:
                self._add(t)
            self.base = self.peak = self.current

        def _add(self, t: Any) -> None:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                return
            st = t.untyped_storage()
            key = st.data_ptr()
            if key == 0 or key in self.live:
                return
            n = st.nbytes()
            self.live[key] = (StorageWeakRef(st), n)
            self.current += n

        def _sweep(self) -> None:
            dead = [k for k, (ref, _) in self.live.items() if ref.expired()]
            for k in dead:
                self.current -= self.live.pop(k)[1]

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                self._add(t)
            self.peak = max(self.peak, self.current)
            self._sweep()
            return out

    return TensorMemory


def _build(system: str, args: argparse.Namespace) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(model, a training step, the optimiser, info) of one system."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=max(1, args.width // 64), n_positions=args.seq,
                     vocab_size=args.vocab)
    base = GPT2LMHeadModel(cfg).to(args.device)
    info: dict[str, Any] = {"base_params": sum(p.numel() for p in base.parameters())}
    import bbb

    if system == "full":
        for p in base.parameters():
            p.requires_grad_(True)
        model = bbb.bayesianize(base, prior=bbb.GaussianPrior(0.2))
    else:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(base, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=["c_attn"],
                                                fan_in_fan_out=True))
        if system != "lora":
            model = bbb.bayesianize(model, lora="A" if system == "bayes_a" else "AB")
    params = [p for p in model.parameters() if p.requires_grad]
    info["trainable"] = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(args.vocab, (args.batch, args.seq), generator=g).to(args.device)
    batch = {"input_ids": ids, "labels": ids}
    if system == "lora":
        def loss_fn() -> Any:
            return model(**batch).loss
    else:
        elbo = bbb.ELBO(model, "categorical", num_batches=1000, kl_weighting="uniform")

        def loss_fn() -> Any:
            return elbo(batch).loss / ids.numel()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()

    return model, step, opt, info


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(system: str, args: argparse.Namespace) -> dict[str, Any]:
    """One system's numbers (run in a child process)."""
    import torch

    torch.set_num_threads(args.threads)
    model, step, opt, info = _build(system, args)
    for _ in range(args.warmup):
        step()
    _sync(args.device)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        _sync(args.device)
        times.append((time.perf_counter() - t0) / args.steps)
    res: dict[str, Any] = {"system": system, **info, "step_seconds": statistics.median(times), "step_repeats": times}
    opt.zero_grad(set_to_none=True)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        step()
        _sync(args.device)
        res["peak_bytes"] = torch.cuda.max_memory_allocated()
        res["memory_method"] = "torch.cuda.max_memory_allocated over one training step"
    else:
        opt.zero_grad(set_to_none=True)
        seed = [*model.parameters(), *model.buffers(),
                *(v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))]
        with _tensor_memory_mode()(seed) as mem:
            step()
        res["peak_bytes"] = mem.peak
        res["memory_method"] = ("tensor storages counted by a TorchDispatchMode over one training step (live "
                                "parameters, buffers and optimiser state + every storage created until freed)")
    if system != "full":
        res["predict"] = _predict_cost(model, system, args)
    return res


def _predict_cost(model: Any, system: str, args: argparse.Namespace) -> dict[str, float]:
    """Seconds of one prediction on the batch: a forward (LoRA); the mean and k samples (Bayes)."""
    import torch

    ids = torch.randint(args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(2))
    ids = ids.to(args.device)
    model.eval()
    out = {}

    def timed(fn: Any) -> float:
        fn()
        _sync(args.device)
        ts = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            _sync(args.device)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    with torch.no_grad():
        if system == "lora":
            out["forward"] = timed(lambda: model(input_ids=ids).logits)
        else:
            from bbb.uncertainty import predict

            out["mean"] = timed(lambda: predict(model, {"input_ids": ids}, mode="mean"))
            for k in args.samples:
                out[f"k{k}"] = timed(lambda k=k: predict(model, {"input_ids": ids}, num_samples=k,
                                                         batch_size=args.batch))
    return out


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    by = {r["system"]: r for r in rows if "error" not in r}
    base = by.get("lora")
    lines = [f"Command: `{meta['command']}`  ", f"Device: {meta['device']} ({meta['machine']}), torch {meta['torch']}, "
             f"{meta['threads']} threads; batch {meta['batch']} x {meta['seq']} tokens.  ",
             f"Memory: {rows[0].get('memory_method', '-') if rows else '-'}.", "",
             "| system | trainable params | step (s) | step / LoRA | peak tensor MiB | memory / LoRA |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['system']} | failed: {r['error']} | | | | |")
            continue
        rs = f"{r['step_seconds'] / base['step_seconds']:.2f}x" if base else "-"
        rm = f"{r['peak_bytes'] / base['peak_bytes']:.3f}x" if base else "-"
        lines.append(f"| {r['system']} | {r['trainable']:,} | {r['step_seconds']:.4f} | {rs} | "
                     f"{r['peak_bytes'] / 2**20:.1f} | {rm} |")
    lines += ["", "Prediction on the same batch (seconds; Bayes: `bbb.uncertainty.predict`):", ""]
    for r in rows:
        if "predict" in r:
            lines.append(f"- {r['system']}: " + ", ".join(f"{k} {v:.4f}" for k, v in r["predict"].items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Example:\n  python bench/bench_lora.py --out bench/results --threads 2\n"
                                       "  python bench/bench_lora.py --tiny --out /tmp/lora-bench")
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="steps per repeat (default: 5)")
    p.add_argument("--repeats", type=int, default=3, help="repeats, the median reported (default: 3)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--samples", type=int, nargs="+", default=[1, 10], help="k of the sampled prediction")
    p.add_argument("--tiny", action="store_true", help="2 layers, width 64, vocab 1000, 1 step: a smoke run")
    p.add_argument("--out", default="bench/results", help="output folder (default: bench/results)")
    p.add_argument("--stem", default=None, help="file name stem (default: lora-<device>, lora-tiny with --tiny)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.tiny:
        args.layers, args.width, args.vocab, args.seq, args.batch = 2, 64, 1000, 32, 2
        args.steps, args.repeats, args.warmup = 1, 1, 1
    if args.child:
        print(RESULT_MARK + json.dumps(measure(args.child, args)), flush=True)
        return 0
    rows = []
    raw = sys.argv[1:] if argv is None else argv
    for system in args.systems:
        cmd = [sys.executable, str(Path(__file__).resolve()), *raw, "--child", system]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_MARK)]
        if proc.returncode or not got:
            err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"system": system, "error": err})
        else:
            rows.append(json.loads(got[-1][len(RESULT_MARK):]))
        print(f"{system}: " + (rows[-1].get("error") or f"step {rows[-1]['step_seconds']:.4f} s, "
                                                       f"peak {rows[-1]['peak_bytes'] / 2**20:.1f} MiB"), flush=True)
    import torch

    meta = {"command": "python bench/bench_lora.py " + " ".join(shlex.quote(a) for a in raw),
            "device": args.device, "torch": torch.__version__,
            "machine": (torch.cuda.get_device_name(args.device) if args.device.startswith("cuda")
                        else platform.processor() or platform.machine()),
            "threads": args.threads, "batch": args.batch, "seq": args.seq, "layers": args.layers, "width": args.width}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.stem or ("lora-tiny" if args.tiny else f"lora-{args.device.replace(':', '')}")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / f"{stem}.md").write_text(_markdown(rows, meta))
    print(f"wrote {out / stem}.json, .md")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
