"""The last-layer Laplace rows of ``bbb reproduce fashion`` (``--methods laplace``; beyond the
IVON paper's table): each seed's AdamW network at AdamW's chosen weight decay (the ``adamw`` row's
test job: nothing trains again), then :func:`bbb.laplace.fit_last_layer_laplace` on the 60,000
training images (KFAC, the prior precision by the marginal likelihood) and the probit predictive,
scored as the other rows.

A row is kept in ``<out>/jobs/test-laplace-s<seed>.json`` with what it was fitted on (the AdamW
job's result), and fitted again only when that changes. Without laplace-torch the default methods
leave it out (one line says so) and ``--methods laplace`` stops before anything trains
(:mod:`~bbb.experiments.fashion.command`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from ...io import atomic_torch_save, atomic_write_json
from .settings import FashionConfig, FashionMethod, Phase, Setting
from .train import Job, lenet5, load_data, scores

__all__ = ["laplace_rows", "adamw_job", "SETTING"]

#: the rows' setting column
SETTING = "last layer, KFAC, probit"


def adamw_job(seed: int, setting: Setting) -> Job:
    """The AdamW test job (at AdamW's chosen ``setting``) whose network seed ``seed``'s Laplace row is
    fitted on."""
    return Job(FashionMethod.ADAMW, seed, Phase.TEST, setting)


def _fit(cfg: FashionConfig, folder: Path, job: Job, adamw: dict[str, Any]) -> dict[str, Any]:
    from ...laplace import fit_last_layer_laplace

    seed = job.seed
    net = lenet5()
    net.load_state_dict(torch.load(folder / job.name / "last.pt", map_location="cpu", weights_only=True)["model"])
    net.eval()
    data = load_data(Phase.TEST, cfg.schedule, cfg.data_dir, torch.device("cpu"))
    start = time.perf_counter()
    post = fit_last_layer_laplace(net, (data["x_train"], data["y_train"]), likelihood="classification")
    eval_probs, ood_probs = post.predict(data["x_eval"]), post.predict(data["x_ood"])
    seconds = time.perf_counter() - start
    atomic_torch_save(folder / f"test-laplace-s{seed}" / "probs.pt",
                      {"eval": eval_probs.cpu(), "labels": data["y_eval"].cpu(), "ood": ood_probs.cpu()})
    return {"job": f"test-laplace-s{seed}", "method": str(FashionMethod.LAPLACE), "seed": seed, "phase": "test",
            "setting": f"{SETTING} (adamw {job.setting.label()})", "of_job": job.name, "epochs": adamw["epochs"],
            "n_train": len(data["y_train"]),
            "n_eval": len(data["y_eval"]), "seconds_per_epoch": adamw["seconds_per_epoch"],
            "fit_seconds": round(seconds, 2), "prior_precision": post.prior_precision,
            "devices": adamw.get("devices"), "torch": torch.__version__,
            **scores(eval_probs, data["y_eval"], ood_probs)}


def laplace_rows(cfg: FashionConfig, folder: Path, results: dict[str, dict[str, Any]],
                 setting: Setting | None) -> list[dict[str, Any]]:
    """One row per seed whose AdamW test job (at AdamW's chosen ``setting``; None: not chosen yet, no
    rows) is finished (in ``results``), fitted or read back."""
    rows: list[dict[str, Any]] = []
    if setting is None:
        return rows
    for seed in cfg.seeds:
        job = adamw_job(seed, setting)
        adamw = results.get(job.name)
        if adamw is None:
            continue
        path = folder / f"test-laplace-s{seed}.json"
        old = json.loads(path.read_text()) if path.is_file() else None
        if old is not None and old.get("key") == adamw:
            rows.append(old["row"])
            continue
        row = _fit(cfg, folder, job, adamw)
        atomic_write_json(path, {"key": adamw, "row": row})
        rows.append(row)
    return rows
