"""The scripts in examples/ run, at a tiny size: on the real data where $BBB_DATA has it, on
generated data (``--synthetic``) otherwise."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bbb_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _data(*datasets: str) -> list[str]:
    d = os.environ.get("BBB_DATA")
    if d and all((Path(d) / ds / "t10k-images-idx3-ubyte.gz").exists() for ds in datasets):
        return ["--data-dir", d]
    return ["--synthetic"]


def test_examples_folder_is_complete():
    names = {p.stem for p in EXAMPLES.glob("*.py")}
    assert {"fashion_cnn", "convert_pretrained", "lightning_module", "heteroscedastic_regression",
            "transformer_text", "hf_text_classifier"} <= names


def test_transformer_text(capsys):
    res = _load("transformer_text").main(["--steps", "20", "--train-size", "256", "--samples", "4"])
    assert 0 <= res["test_error"] <= 1
    assert res["mutual_information_unseen_tokens"] > 0
    assert "weights Bayesian" in capsys.readouterr().out


def test_hf_text_classifier(capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    res = _load("hf_text_classifier").main(["--train-size", "128", "--test-size", "32", "--finetune-epochs", "1",
                                            "--bbb-epochs", "1", "--samples", "3"])
    assert 0 <= res["test_error"] <= 1 and res["bayesian_share"] > 0.95
    assert res["mutual_information_unseen_tokens"] > 0 and res["reloaded_exact"] == 1.0
    assert "weights Bayesian" in capsys.readouterr().out


def test_fashion_cnn(capsys):
    res = _load("fashion_cnn").main([*_data("fashion-mnist", "mnist"), "--train-size", "256", "--test-size", "64",
                                     "--batch-size", "64", "--eval-samples", "3"])
    assert 0 <= res["fashion_test_error"] <= 1
    assert res["entropy_fashion_test"] > 0 and res["entropy_mnist_digits"] > 0
    assert "entropy_mnist_digits" in capsys.readouterr().out


def test_convert_pretrained():
    res = _load("convert_pretrained").main([*_data("mnist"), "--train-size", "512", "--test-size", "128",
                                            "--epochs", "1", "--bbb-epochs", "1", "--eval-samples", "3",
                                            "--rho-lr-scale", "3", "10"])
    for part in ("deterministic", "bayesian"):
        assert set(res[part]) == {"error", "nll", "ece", "brier"}
    assert set(res["ood_auroc"]) == {"deterministic_entropy", "bayesian_entropy", "bayesian_mutual_information"}
    assert all(0 <= v <= 1 for v in res["ood_auroc"].values())
    assert res["sigma"]["median_abs_log_change"] > 0  # the fine-tune moved sigma
    # one fine-tune per scale, the larger step the wider; the one kept follows the stated rule on the
    # validation rows: the widest no worse than the deterministic network, else the lowest error
    cands, choice = res["candidates"], res["choice"]
    assert set(cands) == {"rho_lr_scale=3", "rho_lr_scale=10"}
    assert cands["rho_lr_scale=10"]["sigma_median"] > cands["rho_lr_scale=3"]["sigma_median"]
    ok = [c for c in cands.values() if c["val_error"] <= choice["deterministic_val_error"] + 0.0025
          and c["val_nll"] <= choice["deterministic_val_nll"]]
    kept = cands[f"rho_lr_scale={choice['rho_lr_scale']:g}"]
    if ok:
        assert kept["sigma_median"] == max(c["sigma_median"] for c in ok)
    else:
        assert kept["val_error"] == min(c["val_error"] for c in cands.values())
    assert res["sigma"]["median_after"] == kept["sigma_median"]


def test_heteroscedastic_regression():
    res = _load("heteroscedastic_regression").main(["--n", "64", "--steps", "30", "--samples", "5"])
    assert all(v >= 0 for v in res.values())


def test_lightning_module(tmp_path):
    pytest.importorskip("pytorch_lightning", reason="the lightning extra is not installed: "
                        "pip install -e '.[lightning]'")
    res = _load("lightning_module").main([*_data("mnist"), "--train-size", "256", "--test-size", "64",
                                          "--out", str(tmp_path)])
    assert "val/error" in res
