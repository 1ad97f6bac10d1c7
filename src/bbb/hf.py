"""Save a converted Hugging Face model and load it back exact: :func:`save_pretrained` and
:func:`from_pretrained`.

A folder as Hugging Face users expect it: ``config.json`` (and ``generation_config.json``) written
by transformers, the weights in ``model.safetensors`` (the posterior: every ``*_mu``/``*_rho``, the
deterministic parameters and buffers, pruning masks), plus ``bbb_conversion.json``, what
:func:`bbb.bayesianize` made of the model (every Bayesian layer with its type, estimator, prior and
``rho_init``; the dtype). :func:`from_pretrained` builds the model from the config (random init,
nothing downloaded), converts the same layers the same way and loads the weights: every posterior
is bit-exact.

transformers' own ``model.save_pretrained(folder)`` on a converted model writes the same
``config.json`` and ``model.safetensors`` (without ``bbb_conversion.json``), but
``AutoModel...from_pretrained(folder)`` builds the *deterministic* model: it reports every
``*_mu``/``*_rho`` as unexpected, every ``weight``/``bias`` of a converted layer as missing, and
returns those layers randomly initialised. :func:`from_pretrained` reads such a folder too (the
Bayesian layers are those with ``*_mu`` keys; pass ``prior=``/``estimator=`` if they were not the
defaults).

transformers and safetensors are imported inside the functions only.

>>> bbb.bayesianize(model)                        # e.g. a GPT2LMHeadModel
>>> bbb.save_pretrained(model, "gpt2-bayes")
>>> again = bbb.from_pretrained("gpt2-bayes")     # the class from config.architectures
"""

from __future__ import annotations

import json
import secrets
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .convert import bayesianize
from .distributions import prior_from_config
from .errors import UserError
from .io import atomic_write_text
from .nn import BayesModule
from .nn.base import Estimator
from .nn.tied import tie_groups
from .records import CONVERSION_FILE, layer_spec

__all__ = ["save_pretrained", "from_pretrained", "generate", "conversion_record", "layer_spec", "causal_lm",
           "decoder_inputs", "check_checkpointing",
           "CONVERSION_FILE",
           "WEIGHTS_FILE"]

#: the weights, as transformers names them
WEIGHTS_FILE = "model.safetensors"
_FORMAT = 1
#: the key of the safetensors metadata that names the save its conversion record describes
_WEIGHTS_ID = "bbb_weights_id"


def causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` is a transformers causal language model (a class of transformers'
    ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: GPT-2, Llama...; a peft model is looked through): its
    ``labels`` are the input tokens, which the model shifts to score the next token. Nothing is
    imported: False when transformers is not loaded."""
    if "transformers" not in sys.modules:
        return False
    inner = model
    get = getattr(model, "get_base_model", None)
    if callable(get):
        inner = get()
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:  # pragma: no cover - another transformers layout
        return False
    names = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    return any(c.__name__ in names for c in type(inner).__mro__)


def decoder_inputs(model: nn.Module, inputs: Any, labels: Any, who: str) -> Any:
    """``inputs`` as a transformers encoder-decoder LM (BART, T5...; a peft model is looked through)
    would read them given ``labels``: with the ``decoder_input_ids`` it makes from them inside its
    forward (``prepare_decoder_input_ids_from_labels``: the labels shifted right, -100 as padding),
    since bbb scores the labels itself and does not pass them to the model (without them its decoder
    would read other tokens, BART's the source shifted, and the labels be scored against the wrong
    outputs). A batch with its own ``decoder_input_ids`` (or embeddings), another model, or no
    mapping: ``inputs`` as given. A model that makes them another way (no such method): a one-line
    error saying to give them. Nothing is imported."""
    if not isinstance(inputs, Mapping) or "transformers" not in sys.modules:  # (a tensor first: traced for free)
        return inputs
    if "decoder_input_ids" in inputs or "decoder_inputs_embeds" in inputs:
        return inputs
    get = getattr(model, "get_base_model", None)
    inner = get() if callable(get) else model
    if not getattr(getattr(inner, "config", None), "is_encoder_decoder", False) or not _decodes_labels(inner):
        return inputs  # (BartForSequenceClassification's decoder reads its input_ids, shifted: no labels needed)
    make = getattr(inner, "prepare_decoder_input_ids_from_labels", None)
    if callable(make) and isinstance(labels, torch.Tensor):
        made = make(labels=labels)
        for value in inputs.values():  # on the inputs' device (evaluate's labels may be on the host)
            if isinstance(value, torch.Tensor):
                made = made.to(value.device)
                break
        return {**inputs, "decoder_input_ids": made}
    raise UserError(f"{who}: {type(inner).__name__} is an encoder-decoder model, whose decoder reads the labels "
                    "shifted (transformers makes them from 'labels', which bbb scores and does not pass to the "
                    "model): give the batch its 'decoder_input_ids', as transformers' "
                    "DataCollatorForSeq2Seq(tokenizer, model=model) does")


def _decodes_labels(model: nn.Module) -> bool:
    """Whether the transformers encoder-decoder ``model`` makes its decoder's inputs from ``labels``:
    a sequence-to-sequence language model (``prepare_decoder_input_ids_from_labels``, or a class of
    transformers' seq2seq, speech-seq2seq or vision-to-text mappings: Whisper), not a classifier."""
    if callable(getattr(model, "prepare_decoder_input_ids_from_labels", None)):
        return True
    try:
        from transformers.models.auto import modeling_auto as auto
    except ImportError:  # pragma: no cover - another transformers layout
        return False
    names: set[str] = set()
    for mapping in ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
                    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES"):
        names |= set(getattr(auto, mapping, {}).values())
    return any(c.__name__ in names for c in type(model).__mro__)


def generate(model: nn.Module, inputs: Any, num_samples: int | None = None, **kwargs: Any) -> torch.Tensor:
    """Text from a Bayesian causal LM (converted whole, or a Bayesian LoRA model): transformers'
    ``model.generate`` with the posterior mean, or with ``num_samples`` networks drawn from the
    posterior, **one network per sequence**.

    ``inputs``: the prompt ids (B, T) or a mapping (``{"input_ids", "attention_mask"}``). ``kwargs``
    go to ``generate`` (``max_new_tokens``, ``do_sample``...). ``num_samples=None``: one network, the
    posterior mean (the deterministic choice; greedy decoding then writes what the mean model writes);
    returns (B, T'). ``num_samples=k``: k networks drawn from the posterior, network j writing the whole
    of its copy of every prompt (the same draw at every step, through the KV cache): what the
    posterior says the model might write, for diversity or uncertainty over whole answers; returns
    (k, B, T'), or (k, B * n, T') with ``num_return_sequences=n`` (prompt i's n at rows i * n..).
    The k networks run batched (the prompts repeated k times in one ``generate`` call).
    The model runs in ``eval()`` (its dropout off: a model left in ``train()`` after a training loop
    would draw new dropout masks at every token) and is left in the mode it was in. Layers trained
    with the ``flipout`` or ``local`` estimator draw their weights here as ``reparam`` layers do (the
    same posterior): their own noise is per example and per call, so network j would not be one
    network across the tokens and prompts.

    >>> texts = bbb.hf.generate(model, {"input_ids": ids, "attention_mask": mask}, num_samples=5,
    ...                         max_new_tokens=20)       # (5, B, T'): 5 adapters drawn from q
    """
    from .nn import folded_samples, sampling, shared_samples
    from .nn.inputs import fold_inputs, input_batch_size
    from .nn.model import modes_kept, whole_weights

    get = getattr(model, "get_base_model", None)
    inner = get() if callable(get) else model  # (a peft model has generate whatever the model it adapts)
    if not callable(getattr(model, "generate", None)) or not callable(getattr(inner, "generate", None)):
        raise UserError(f"generate needs a transformers model with .generate (a generating one: GPT-2, Llama, "
                        f"BART...), got {type(inner).__name__}")
    kw = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}  # (a tokenizer's BatchEncoding too)
    # in eval() inside (each module back in its own mode after): a dropout layer, peft's lora_dropout
    # included, would otherwise draw new masks at every token of a model left in train()
    if num_samples is None:
        with torch.no_grad(), modes_kept(model), sampling(model, "mean"):
            return model.generate(**kw, **kwargs)  # type: ignore[operator]
    from .errors import check_int
    from .lora import warn_untrained

    k = check_int("num_samples", num_samples)
    b = input_batch_size(kw, 0)
    warn_untrained(model, "generate")
    with (torch.no_grad(), modes_kept(model), whole_weights(model), sampling(model, "sample"), shared_samples(),
          folded_samples(k)):
        out = model.generate(**fold_inputs(kw, k, 0, b), **kwargs)  # type: ignore[operator]
    if not isinstance(out, torch.Tensor):
        raise UserError("bbb.hf.generate with num_samples returns the sequences (k, B, T'): leave "
                        "return_dict_in_generate unset")
    return out.view(k, -1, *out.shape[1:])  # (k, B * num_return_sequences, T'), prompt by prompt


def check_checkpointing(model: nn.Module, k: int, engine: bool, generator: bool) -> None:
    """A :class:`UserError` for a training step whose weight samples gradient checkpointing (transformers'
    ``gradient_checkpointing_enable``: modules with ``gradient_checkpointing = True``) would not redraw:
    the backward pass recomputes each checkpointed block outside the ELBO's forward, from torch's global
    random state (which the checkpoint restores). Only one sample on the plain path, without a
    ``generator``, under torch's non-reentrant checkpoint (transformers' default) recomputes the same
    weights; otherwise the gradient would be that of other weights than the loss's."""
    if "transformers" not in sys.modules or not (model.training and torch.is_grad_enabled()):
        return  # (the flag is transformers'; nothing to look at on other models, every step)
    found = [(n, m) for n, m in model.named_modules() if getattr(m, "gradient_checkpointing", False) is True]
    if not found:
        return
    name, mod = found[0]
    kwargs = getattr(getattr(mod, "_gradient_checkpointing_func", None), "keywords", None) or {}
    reentrant = kwargs.get("use_reentrant") is not False
    if k == 1 and not engine and not generator and not reentrant:
        return
    what = (f"num_samples={k}" if k > 1 else "the Engine's sampling()" if engine else "a generator" if generator
            else "use_reentrant=True")
    raise UserError(f"the ELBO: {type(model).__name__} has gradient checkpointing on ({name}), whose backward "
                    f"pass recomputes each checkpointed block outside the ELBO, so under {what} it would draw other "
                    "weights than the loss's and give another network's gradient: with gradient checkpointing train "
                    "with num_samples=1, no generator=, on torch.optim rather than the Engine, and "
                    "gradient_checkpointing_kwargs={'use_reentrant': False}, or call "
                    "model.gradient_checkpointing_disable()")


def conversion_record(model: nn.Module) -> dict[str, Any]:
    """What :func:`bbb.bayesianize` made of ``model``: every Bayesian layer (qualified name ->
    type, estimator, prior config or None when it cannot be written, rho_init) and the dtype."""
    layers = {name: layer_spec(m) for name, m in model.named_modules() if isinstance(m, BayesModule)}
    if not layers:
        raise UserError(f"{type(model).__name__} has no Bayesian layer: run bbb.bayesianize(model) first, or use "
                        "transformers' model.save_pretrained for a deterministic model")
    p = next(model.parameters())
    return {"format": _FORMAT, "dtype": str(p.dtype).removeprefix("torch."), "class": type(model).__name__,
            "layers": layers}


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state with every tensor contiguous and no two sharing memory (safetensors' rule)."""
    out, seen = {}, set()
    for k, v in state.items():
        v = v.detach()
        key = (v.untyped_storage().data_ptr(), v.storage_offset()) if v.numel() else None
        out[k] = v.clone().contiguous() if key in seen or not v.is_contiguous() else v
        if key is not None:
            seen.add(key)
    return out


def save_pretrained(model: nn.Module, folder: str | Path) -> Path:
    """Write a converted transformers model to ``folder``: ``config.json`` (+
    ``generation_config.json``), ``model.safetensors`` (the whole ``state_dict``: every posterior)
    and ``bbb_conversion.json`` (:func:`conversion_record`). Returns the folder. A Bayesian LoRA
    model (a peft model after :func:`bbb.bayesianize`) writes its adapter folder instead, as its
    own ``save_pretrained`` does (:mod:`bbb.lora`).

    >>> bbb.save_pretrained(bbb.bayesianize(model), "out/bert-bayes")
    """
    from safetensors.torch import save_file

    from .lora import is_lora_model

    if is_lora_model(model) and "bbb_lora" in model.__dict__ and hasattr(model, "save_pretrained"):
        save: Any = model.save_pretrained
        save(str(folder))  # a Bayesian LoRA model: peft's adapter folder (adapters only)
        return Path(folder)
    from .lora import ADAPTER_CONFIG

    if (Path(folder) / ADAPTER_CONFIG).is_file():  # (from_pretrained would read the adapter, with this record)
        raise UserError(f"{folder} holds a LoRA adapter ({ADAPTER_CONFIG}): the whole model saved there would "
                        f"overwrite the adapter's {CONVERSION_FILE}, and from_pretrained would read the adapter; save "
                        "it to another folder")
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        raise UserError(f"save_pretrained needs a transformers model (with .config), got {type(model).__name__}; "
                        "for any other model save model.state_dict() (torch.save) and bayesianize before loading")
    record = conversion_record(model)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    config.architectures = [type(model).__name__]
    config.save_pretrained(out)
    gen = getattr(model, "generation_config", None)
    if gen is not None and hasattr(gen, "save_pretrained"):
        gen.save_pretrained(out)
    # the record names the weights it describes: weights written over since (transformers' own save_pretrained
    # into this folder, a save stopped before its record) are not read with its priors and estimators
    record["weights_id"] = secrets.token_hex(8)
    save_file(_unshared(model.state_dict()), str(out / WEIGHTS_FILE),
              metadata={"format": "pt", _WEIGHTS_ID: record["weights_id"]})
    atomic_write_text(out / CONVERSION_FILE, json.dumps(record, indent=1) + "\n")
    return out


def _model_class(config: Any, model_class: Any) -> Any:
    if model_class is not None:
        return model_class
    import transformers

    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    if cls is None:
        raise UserError(f"the folder's config.json names no transformers class (architectures={names!r}); "
                        "pass model_class=, e.g. from_pretrained(folder, GPT2LMHeadModel)")
    return cls


def from_pretrained(folder: str | Path, model_class: Any = None, *, prior: Any = None,
                    estimator: Estimator | str | None = None, base_model: nn.Module | None = None,
                    adapter_name: str = "default", is_trainable: bool = False) -> nn.Module:
    """The model :func:`save_pretrained` wrote to ``folder``, every posterior exact, in ``eval()``
    mode (as transformers' ``from_pretrained``; ``train()`` samples again). A Bayesian LoRA adapter
    folder (peft's ``adapter_config.json``, written by the peft model's ``save_pretrained``) loads
    onto ``base_model``: :func:`bbb.lora.load_pretrained` (``adapter_name``, ``is_trainable`` as
    peft's ``PeftModel.from_pretrained``).

    Args:
        folder: a local folder (nothing is downloaded).
        model_class: the transformers class (e.g. ``GPT2LMHeadModel``); None: the one
            ``config.json`` names (``architectures``).
        prior: the prior of every Bayesian layer, in place of the recorded ones: needed for a
            folder that transformers' own ``save_pretrained`` wrote (no ``bbb_conversion.json``)
            from a model converted with another prior, or for a prior that cannot be written (a
            ``torch.distributions`` one).
        estimator: the estimator of every Bayesian layer, in place of the recorded ones (needed,
            as ``prior``, for a folder without ``bbb_conversion.json`` and another estimator).

    >>> model = bbb.from_pretrained("out/gpt2-bayes")
    >>> model.generate(ids, max_new_tokens=20)        # the posterior mean; bbb.nn.sampling to sample
    """
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import AutoConfig

    src = Path(folder)
    from .lora import ADAPTER_CONFIG, load_pretrained

    if (src / ADAPTER_CONFIG).is_file():
        if base_model is None:
            raise UserError(f"{src} holds a LoRA adapter: pass the model it adapts, "
                            "bbb.from_pretrained(folder, base_model=AutoModel...from_pretrained(...))")
        return load_pretrained(src, base_model, adapter_name=adapter_name, is_trainable=is_trainable,
                               bayesianize=bayesianize)
    if base_model is not None:
        raise UserError(f"base_model= is for a LoRA adapter folder, and {src} holds no {ADAPTER_CONFIG}")
    if not (src / WEIGHTS_FILE).is_file():
        raise UserError(f"{src} holds no {WEIGHTS_FILE}: save the model with bbb.save_pretrained(model, folder)")
    state = load_file(str(src / WEIGHTS_FILE))
    record_path = src / CONVERSION_FILE
    record = json.loads(record_path.read_text()) if record_path.is_file() else None
    if record is not None and record.get("format") != _FORMAT:
        raise UserError(f"{record_path} has format {record.get('format')!r}; this bbb reads format {_FORMAT}")
    if record is not None and "weights_id" in record:  # (a record of an older bbb names none)
        with safe_open(str(src / WEIGHTS_FILE), "pt") as f:
            saved_id = (f.metadata() or {}).get(_WEIGHTS_ID)
        if saved_id != record["weights_id"]:
            raise UserError(f"{record_path} describes another save than {src / WEIGHTS_FILE} (written over since: by "
                            f"transformers' own save_pretrained, or a save stopped midway): remove {CONVERSION_FILE} "
                            "and pass prior= and estimator= as the model was converted, or save it again with "
                            "bbb.save_pretrained")
    if record is not None:
        layers: dict[str, dict[str, Any]] = record["layers"]
    else:  # transformers' own save_pretrained: the Bayesian layers are those with a posterior
        layers = {k.rsplit(".", 1)[0]: {} for k in state if k.endswith(("weight_mu", "bias_mu"))}
        if not layers:
            raise UserError(f"{src / WEIGHTS_FILE} holds no posterior (no *_mu key): load it with transformers")
    config = AutoConfig.from_pretrained(str(src))
    model = _model_class(config, model_class)(config)
    if record is None:  # a tied layer holds no posterior of its own: it follows its source
        for group in tie_groups(model):
            if any(n in layers for n, _ in group):
                layers.update({n: {} for n, _ in group if n not in layers})
    if record is not None:
        model.to(getattr(torch, record["dtype"]))
    first = next(iter(layers.values()))
    chosen_prior = prior if prior is not None else first.get("prior")
    if prior is None and any(v.get("prior", 0) is None for v in layers.values()):
        raise UserError(f"{record_path} could not record the prior (a torch.distributions one?): pass prior=")
    with warnings.catch_warnings():  # what stays deterministic was said when the model was converted
        warnings.simplefilter("ignore", UserWarning)
        bayesianize(model, prior=chosen_prior, estimator=estimator or first.get("estimator", Estimator.REPARAM),
                    skip=lambda name, mod: name not in layers)
    made = {n for n, m in model.named_modules() if isinstance(m, BayesModule)}
    if made != set(layers):
        diff = sorted(made ^ set(layers))[:5]
        raise UserError(f"{type(model).__name__} built from {src} converts differently from the saved model "
                        f"(layers {', '.join(diff)}...): pass the class it was saved from, model_class=")
    for name, spec in layers.items():  # a layer set apart after conversion keeps its own settings
        m = model.get_submodule(name)
        assert isinstance(m, BayesModule)
        if prior is None and spec.get("prior") is not None:
            m.prior = prior_from_config(spec["prior"])
        if estimator is None and "estimator" in spec:
            m.estimator = Estimator(spec["estimator"])
        if "rho_init" in spec:
            m.rho_init = float(spec["rho_init"])
    _saved_dtypes(model, state)
    model.load_state_dict(state, strict=True)
    return model.eval()


def _saved_dtypes(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Each floating-point parameter and buffer of ``model`` in the dtype ``state`` holds it in (a
    model kept partly in float32, as transformers' ``_keep_in_fp32_modules``, loads exact rather than
    rounded to the dtype of the record)."""
    for key, saved in state.items():
        owner, _, attr = key.rpartition(".")
        t = getattr(model.get_submodule(owner), attr, None)
        if (isinstance(t, torch.Tensor) and t.is_floating_point() and saved.is_floating_point()
                and t.dtype != saved.dtype):
            t.data = t.data.to(saved.dtype)
