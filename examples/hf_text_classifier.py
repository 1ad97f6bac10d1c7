"""A Hugging Face BERT classifier, fine-tuned, made Bayesian, trained with the ELBO on Hugging Face
batches, and its uncertainty (docs/huggingface.md).

Nothing is downloaded: the model is ``BertForSequenceClassification`` built from a small
``BertConfig`` (random init), and the data is made here: sequences of 6-12 tokens (padded with
token 0, ``attention_mask`` 0 there), each holding one key token (1, 2 or 3: the class) among
filler tokens 4-31; tokens 32-63 never occur in training. The steps a user with a model of their
own takes:

1. fine-tune the deterministic model as transformers does (``model(**batch).loss``);
2. ``bbb.bayesianize(model)``: every Linear and Embedding gets a posterior whose mean starts at
   the fine-tuned weights (the LayerNorms stay point estimates, said);
3. train with the ELBO on the same batches, ``{"input_ids", "attention_mask", "labels"}``
   (``"labels"`` is the target; the model's ``SequenceClassifierOutput`` gives its ``logits``);
4. ``predict`` k networks on the test sequences and on sequences of unseen tokens: the mutual
   information (the networks' disagreement) should be larger on the unseen ones (its AUROC as an
   out-of-distribution score, next to the deterministic model's entropy's);
5. ``bbb.save_pretrained`` / ``bbb.from_pretrained``: the posterior comes back exact.

    python examples/hf_text_classifier.py
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

import bbb
from bbb.uncertainty import auroc, mutual_information, predict, predictive_entropy, predictive_probs

VOCAB, LENGTH, CLASSES, SEEN, PAD = 64, 12, 3, 32, 0


def make_data(n: int, gen: torch.Generator, unseen: bool = False) -> dict[str, torch.Tensor]:
    """``n`` padded sequences as a Hugging Face batch; ``unseen=True``: tokens never trained on, no key."""
    lengths = torch.randint(LENGTH // 2, LENGTH + 1, (n,), generator=gen)
    mask = (torch.arange(LENGTH) < lengths[:, None]).long()
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    if unseen:
        ids = torch.randint(SEEN, VOCAB, (n, LENGTH), generator=gen)
    else:
        ids = torch.randint(CLASSES + 1, SEEN, (n, LENGTH), generator=gen)
        key = (torch.rand(n, generator=gen) * lengths).long()  # a position inside each sequence
        ids[torch.arange(n), key] = labels + 1
    return {"input_ids": ids.masked_fill(mask == 0, PAD), "attention_mask": mask, "labels": labels}


def loader(data: dict[str, torch.Tensor], batch_size: int, gen: torch.Generator) -> DataLoader:
    """A DataLoader of Hugging Face-style batches (dicts of tensors), as a ``Dataset`` of dicts gives."""
    rows = [{k: v[i] for k, v in data.items()} for i in range(len(data["labels"]))]
    return DataLoader(rows, batch_size=batch_size, shuffle=True, generator=gen)  # type: ignore[arg-type]


def build_model(seed: int) -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=CLASSES,
                        pad_token_id=PAD, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Example: python examples/hf_text_classifier.py --bbb-epochs 3 --samples 50")
    p.add_argument("--train-size", type=int, default=2048, metavar="N",
                   help="training sequences, generated (default: 2048)")
    p.add_argument("--test-size", type=int, default=512, metavar="N", help="test sequences, generated (default: 512)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="minibatch size (default: 64)")
    p.add_argument("--finetune-epochs", type=int, default=6, help="deterministic fine-tuning (default: 6)")
    p.add_argument("--bbb-epochs", type=int, default=5, help="ELBO epochs after bayesianize (default: 5)")
    p.add_argument("--lr", type=float, default=2e-3, help="the ELBO's learning rate (default: 2e-3)")
    p.add_argument("--rho-lr-scale", type=float, default=10.0,
                   help="rho's learning rate is lr * this (default: 10), so that sigma moves in a short fine-tune")
    p.add_argument("--samples", type=int, default=20, help="weight samples per prediction (default: 20)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    args = p.parse_args(argv)
    import transformers

    transformers.logging.set_verbosity_error()
    gen = torch.Generator().manual_seed(args.seed)
    train = loader(make_data(args.train_size, gen), args.batch_size, gen)
    test, unseen = make_data(args.test_size, gen), make_data(args.test_size, gen, unseen=True)
    test_labels = test.pop("labels")
    unseen.pop("labels")

    # 1. the deterministic model, fine-tuned the transformers way
    model = build_model(args.seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(args.finetune_epochs):
        for batch in train:
            loss = model(**batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():  # its error, and its entropy as an out-of-distribution score
        det_logits, det_ood = model(**test).logits.unsqueeze(0), model(**unseen).logits.unsqueeze(0)
    det_error = float((det_logits[0].argmax(-1) != test_labels).float().mean())

    # 2. Bayesian, the posterior means at the fine-tuned weights
    bbb.bayesianize(model, skip=[nn.LayerNorm])  # the norms stay point estimates, on purpose
    print(bbb.layer_summary(model))

    # 3. the ELBO on Hugging Face batches; rho's larger step lets sigma move in a short fine-tune
    elbo = bbb.ELBO(model, "categorical", num_batches=len(train), num_samples=2,
                    kl_weighting="uniform")  # the KL spread evenly: a fine-tune (docs/your_network.md)
    engine = bbb.Engine(elbo, "adam", lr=args.lr, rho_lr_scale=args.rho_lr_scale, seed=args.seed)
    model.train()
    for _ in range(args.bbb_epochs):
        for i, batch in enumerate(train):
            with engine.sampling():
                out = elbo(batch, batch_index=i)  # "labels" is the target, the rest goes to the model
            engine.zero_grad()
            (out.loss / len(batch["labels"])).backward()
            engine.step()

    # 4. k networks per example: sure on the test sequences, unsure on the unseen tokens
    logits = predict(model, test, num_samples=args.samples)  # (k, B, classes)
    ood = predict(model, unseen, num_samples=args.samples)

    # 5. saved and loaded back as Hugging Face users expect (config.json + model.safetensors)
    with tempfile.TemporaryDirectory() as folder:
        bbb.save_pretrained(model, folder)
        again = bbb.from_pretrained(folder)
    state, loaded = model.state_dict(), again.state_dict()
    exact = state.keys() == loaded.keys() and all(torch.equal(state[k], loaded[k]) for k in state)

    res = {
        "deterministic_test_error": det_error,
        "deterministic_entropy_auroc": auroc(predictive_entropy(det_logits), predictive_entropy(det_ood)),
        "test_error": float((predictive_probs(logits).argmax(-1) != test_labels).float().mean()),
        "entropy_test": float(predictive_entropy(logits).mean()),
        "entropy_unseen_tokens": float(predictive_entropy(ood).mean()),
        "mutual_information_test": float(mutual_information(logits).mean()),
        "mutual_information_unseen_tokens": float(mutual_information(ood).mean()),
        "mutual_information_auroc": auroc(mutual_information(logits), mutual_information(ood)),
        "bayesian_share": bbb.layer_summary(model).bayesian_share,
        "reloaded_exact": float(exact),
    }
    for k, v in res.items():
        print(f"{k:34} {v:.4f}")
    return res


if __name__ == "__main__":
    main()
