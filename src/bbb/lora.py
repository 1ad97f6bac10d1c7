"""Bayesian LoRA: Bayes by Backprop on the adapters of a frozen pretrained model (Hugging Face ``peft``).

:func:`bbb.bayesianize` on a ``peft`` model (``get_peft_model(model, LoraConfig(...))``) converts the
LoRA adapters and nothing else: each adapter's ``lora_A`` (``lora="A"``, the default: BLoB, Wang et al.
NeurIPS 2024) or ``lora_A`` and ``lora_B`` (``lora="AB"``) becomes the matching Bayesian layer
(:class:`~bbb.nn.BayesLinear`, :class:`~bbb.nn.BayesConv2d`...), its posterior mean at the adapter's
weights (peft's init: A random, B = 0), each weight keeping its ``requires_grad``. The frozen base
model is never copied nor made Bayesian, and the head peft trains in full (``modules_to_save``) stays a
point estimate unless ``modules_to_save=True``. The KL of the ELBO is then the adapters' alone.

The converted model keeps peft's API: ``set_adapter``, several adapters, ``lora_dropout``, rsLoRA
scaling; ``model.save_pretrained(folder)`` writes peft's adapter folder (the posterior: the mean under
peft's own key ``lora_A.weight``, sigma's parameter as ``lora_A.weight_rho``) with the conversion record
``bbb_conversion.json``; :func:`bbb.from_pretrained` (``base_model=``) loads it back exact.
``PeftModel.from_pretrained`` on such a folder loads the posterior means, with peft's warning that the
config key ``bbb_bayesian_lora`` is ignored. ``merge_and_unload()`` / ``merge_adapter()`` merge the
posterior mean, with a warning that says so.

>>> model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
>>> bbb.bayesianize(model, prior=bbb.GaussianPrior(0.2))          # lora="A": BLoB
>>> elbo = bbb.ELBO(model, num_batches=len(loader), kl_weighting="uniform", beta=0.01)

``peft`` is imported by the caller (a peft model has imported it); ``import bbb`` never imports it.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Callable, Container, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .errors import UserError
from .nn import BayesModule, bayes_modules
from .records import CONVERSION_FILE, layer_spec

__all__ = ["LORA_MODES", "LORA_PRIOR_SIGMA", "lora_layers", "is_lora_model", "bayesianize_lora", "lora_record",
           "untrained_adapters", "warn_untrained", "load_pretrained", "optim_groups", "LORA_RHO_LR_SCALE",
           "ADAPTER_CONFIG", "CONFIG_MARK"]

#: ``lora=`` of :func:`bbb.bayesianize`: which adapter matrices are Bayesian, "A" (BLoB: A only, B a
#: point estimate) or "AB"
LORA_MODES: dict[str, tuple[str, ...]] = {"A": ("lora_A",), "AB": ("lora_A", "lora_B")}

#: the prior's standard deviation on a LoRA model when ``prior=None``: N(0, 0.2^2), BLoB's
LORA_PRIOR_SIGMA = 0.2

#: peft's adapter config file, and the key bbb adds to it (peft's own loader warns that it ignores it)
ADAPTER_CONFIG = "adapter_config.json"
CONFIG_MARK = "bbb_bayesian_lora"
_FORMAT = 1


def _peft_lora_layer() -> type | None:
    mod = sys.modules.get("peft.tuners.lora.layer")
    t = getattr(mod, "LoraLayer", None)
    return t if isinstance(t, type) else None


def lora_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, layer) of every peft LoRA layer of ``model`` (none when peft is not imported)."""
    t = _peft_lora_layer()
    if t is None:
        return []
    return [(n, m) for n, m in model.named_modules() if isinstance(m, t)]  # type: ignore[misc]


def is_lora_model(model: nn.Module) -> bool:
    """Whether ``model`` holds peft LoRA layers."""
    return bool(lora_layers(model))


def _check_layer(name: str, layer: nn.Module) -> None:
    """A one-line error for a LoRA layer whose adapters bbb cannot make Bayesian."""
    from peft.tuners import lora

    variants = {a: type(v).__name__ for a, v in getattr(layer, "lora_variant", {}).items()}
    if any(getattr(layer, "use_dora", {}).values()) or any("Dora" in v for v in variants.values()):
        raise UserError(f"bayesianize: {name} is a DoRA adapter (use_dora=True), which bbb does not make Bayesian "
                        "(its magnitude normalises by the weight the mean gives); use LoraConfig(use_dora=False)")
    if variants:
        raise UserError(f"bayesianize: {name} is a LoRA variant ({', '.join(sorted(set(variants.values())))}) that "
                        "bbb does not make Bayesian; use plain LoRA, or skip=[{name!r}]")
    if isinstance(layer, lora.Embedding):
        raise UserError(f"bayesianize: {name} is a LoRA adapter on an nn.Embedding, which bbb does not make "
                        f"Bayesian yet; leave it out of target_modules, or pass skip=[{name!r}] to keep it a "
                        "point estimate")
    if not isinstance(layer, (lora.Linear, lora.layer._ConvNd)):
        raise UserError(f"bayesianize: {name} is a LoRA layer of type {type(layer).__name__}, which bbb does not "
                        f"make Bayesian (it does nn.Linear, transformers' Conv1D and convolutions); pass "
                        f"skip=[{name!r}] to keep it a point estimate")


def bayesianize_lora(model: nn.Module, lora: str | None, modules_to_save: bool,
                     skipped: Callable[[str, nn.Module], bool], convert: Callable[..., nn.Module],
                     kw: dict[str, Any], strict: bool = False,
                     convertible: Container[type] = ()) -> nn.Module:
    """:func:`bbb.bayesianize` on a model with peft LoRA layers (its ``lora=`` and ``modules_to_save=``):
    ``convert(layer, name, **kw)`` makes one layer Bayesian (``bbb.convert.convert_layer``), of the
    types ``convertible`` (``bbb.convert.CONVERTIBLE``; both passed in: this module sits below
    :mod:`bbb.convert`, which calls it)."""
    mode = "A" if lora is None else lora
    if mode not in LORA_MODES:
        raise UserError(f"bayesianize: lora={lora!r}; choose 'A' (A Bayesian, B a point estimate: BLoB) or 'AB' "
                        "(both adapter matrices Bayesian)")
    if not kw["from_weights"]:
        raise UserError("bayesianize: from_weights=False would redraw the LoRA adapters (B = 0 at peft's init); "
                        "a LoRA model's posterior means start at its adapters")
    layers = [(n, m) for n, m in lora_layers(model) if not skipped(n, m)]
    for name, layer in layers:
        _check_layer(name, layer)
    done = 0
    for name, layer in layers:
        for part in LORA_MODES[mode]:
            adapters: nn.ModuleDict = getattr(layer, part)
            for key in list(adapters.keys()):
                mod = adapters[key]
                if isinstance(mod, BayesModule):
                    continue  # converted already
                adapters[key] = convert(mod, f"{name}.{part}.{key}", **kw)
                done += 1
    if modules_to_save:
        done += _convert_heads(model, skipped, convert, kw, convertible)
    if not done and not any(isinstance(m, BayesModule) for m in model.modules()):
        raise UserError(f"bayesianize: {type(model).__name__} has LoRA layers but no adapter to make Bayesian "
                        "(all skipped?)")
    _mark(model, mode, modules_to_save)
    _warn_left(model, mode, modules_to_save, skipped, strict)
    return model


def _warn_left(model: nn.Module, mode: str, modules_to_save: bool, skipped: Callable[[str, nn.Module], bool],
               strict: bool) -> None:
    """Name the modules with trainable parameters that stay point estimates though nothing said so
    (``lora_B`` with ``lora="A"`` and peft's head without ``modules_to_save=True`` are said so; a frozen
    module is not trained: neither Bayesian nor missed)."""
    said: tuple[str, ...] = (".lora_B.",) if mode == "A" else ()
    if not modules_to_save:
        said += (".modules_to_save.",)
    left = [f"{n} ({type(m).__name__})" for n, m in model.named_modules()
            if not isinstance(m, BayesModule) and any(p.requires_grad for p in m.parameters(recurse=False))
            and not any(s in f".{n}." for s in said) and not skipped(n, m)]
    if left:
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        msg = (f"bayesianize: {len(left)} trained module(s) stay point estimates: {', '.join(left[:5])}{more}; "
               "pass skip=[...] to say so")
        if strict:
            raise UserError(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)


def _convert_heads(model: nn.Module, skipped: Callable[[str, nn.Module], bool], convert: Callable[..., nn.Module],
                   kw: dict[str, Any], convertible: Container[type]) -> int:
    """Make the trainable copies of peft's ``modules_to_save`` (the head) Bayesian; how many layers."""
    from peft.utils.other import ModulesToSaveWrapper

    n = 0
    for name, wrapper in list(model.named_modules()):
        if not isinstance(wrapper, ModulesToSaveWrapper) or skipped(name, wrapper):
            continue
        copies: nn.ModuleDict = wrapper.modules_to_save
        for key in list(copies.keys()):
            full = f"{name}.modules_to_save.{key}"
            if type(copies[key]) in convertible:
                copies[key] = convert(copies[key], full, **kw)
                n += 1
            else:
                n += _convert_inside(copies[key], full, convert, kw, convertible)
    return n


def _convert_inside(root: nn.Module, prefix: str, convert: Callable[..., nn.Module], kw: dict[str, Any],
                    convertible: Container[type]) -> int:
    """Convert the convertible layers inside ``root`` (not inside one converted already); how many."""
    n = 0
    for child_name, child in list(root._modules.items()):
        if child is None or isinstance(child, BayesModule):
            continue
        full = f"{prefix}.{child_name}"
        if type(child) in convertible:
            setattr(root, child_name, convert(child, full, **kw))
            n += 1
        else:
            n += _convert_inside(child, full, convert, kw, convertible)
    return n


# ------------------------------------------------------------------------------------------------
# What the model says about itself: the conversion record, saving, merging
# ------------------------------------------------------------------------------------------------

_SWAPPED: dict[tuple[type, type], type] = {}


def _swapped(mixin: type, cls: type) -> type:
    """The class ``mixin + cls``, made once per pair, named ``{mixin}_{cls}`` in this module (where
    pickle finds it again: :func:`__getattr__`)."""
    key = (mixin, cls)
    if key not in _SWAPPED:
        name = f"{mixin.__name__.lstrip('_')}_{cls.__name__}"
        _SWAPPED[key] = type(name, (mixin, cls), {"__module__": __name__, "__qualname__": name})
    return _SWAPPED[key]


def _swap_class(obj: nn.Module, mixin: type) -> None:
    """Give ``obj`` the class ``mixin + type(obj)``: peft's API with bbb's additions."""
    if not isinstance(obj, mixin):
        obj.__class__ = _swapped(mixin, type(obj))


def __getattr__(name: str) -> type:
    """A swapped class by its name (``BayesPeftModel_PeftModelForCausalLM``), for pickle: the peft
    class is looked up in peft's namespace."""
    for mixin in (_BayesPeftModel, _BayesTuner):
        prefix = mixin.__name__.lstrip("_") + "_"
        if name.startswith(prefix):
            import peft

            cls = getattr(peft, name[len(prefix):], None)
            if isinstance(cls, type):
                return _swapped(mixin, cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mark(model: nn.Module, mode: str, modules_to_save: bool) -> None:
    """Note the conversion on the model (a plain attribute, as peft keeps its config) and give the
    peft model and its tuner bbb's ``save_pretrained`` and merge warnings."""
    model.__dict__["bbb_lora"] = {"lora": mode, "modules_to_save": bool(modules_to_save)}
    if hasattr(model, "peft_config") and hasattr(model, "base_model") and hasattr(model, "save_pretrained"):
        _swap_class(model, _BayesPeftModel)
        tuner = model.base_model
        if isinstance(tuner, nn.Module) and hasattr(tuner, "_unload_and_optionally_merge"):
            _swap_class(tuner, _BayesTuner)
            tuner.__dict__["bbb_lora"] = model.__dict__["bbb_lora"]
    elif hasattr(model, "_unload_and_optionally_merge"):
        _swap_class(model, _BayesTuner)


def lora_record(model: nn.Module, adapter: str) -> dict[str, Any]:
    """What :func:`bbb.bayesianize` made of adapter ``adapter`` of ``model``: the LoRA mode, whether the
    head is Bayesian, and every Bayesian layer of the adapter (name without the adapter key -> type,
    estimator, prior config, rho_init)."""

    info = model.__dict__.get("bbb_lora")
    if info is None:
        raise UserError(f"{type(model).__name__} is no Bayesian LoRA model: run bbb.bayesianize(model) first")
    layers, own = {}, []
    for name, m in model.named_modules():
        key = _without_adapter(name, adapter) if isinstance(m, BayesModule) else None
        if key is not None:
            layers[key] = layer_spec(m)
            own.append(m.mu(m.param_names()[0]))
    p = own[0] if own else next(model.parameters())  # the adapter's dtype (peft keeps it float32 on a bf16 base)
    return {"format": _FORMAT, "kind": "lora", "adapter": adapter, "lora": info["lora"],
            "modules_to_save": info["modules_to_save"], "dtype": str(p.dtype).removeprefix("torch."),
            "layers": layers}


#: the modules of a peft LoRA model that hold one entry per adapter, keyed by the adapter's name
_PER_ADAPTER = ("lora_A", "lora_B", "modules_to_save")


def _without_adapter(name: str, adapter: str) -> str | None:
    """The qualified module name ``name`` without its adapter key when the module belongs to adapter
    ``adapter`` (the key after ``lora_A``, ``lora_B`` or ``modules_to_save``), else None: an adapter
    named as a module of the model (``attn``) is told from that module."""
    parts = name.split(".")
    for i in range(len(parts) - 1):
        if parts[i] in _PER_ADAPTER and parts[i + 1] == adapter:
            return ".".join(parts[:i + 1] + parts[i + 2:])
    return None


def _adapter_folders(save_directory: str | Path, adapters: list[str]) -> Iterator[tuple[str, Path]]:
    for a in adapters:  # peft's layout: "default" in the folder, the others in subfolders
        yield a, Path(save_directory) if a == "default" else Path(save_directory) / a


def _peft_keys(saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A saved adapter's state with each Bayesian mean under peft's own key (``X.weight_mu`` beside an
    ``X.weight_rho`` -> ``X.weight``; ``bias`` alike): peft's loader then loads the means onto a plain
    LoRA model, bbb's the whole posterior (:func:`_bbb_state`)."""
    out = {}
    for k, v in saved.items():
        if k.endswith(("weight_mu", "bias_mu")) and f"{k[:-3]}_rho" in saved:
            k = k[:-3]
        out[k] = v
    return out


def _rewrite_saved(folder: Path) -> None:
    """Rename the means in the adapter file peft wrote to ``folder`` (:func:`_peft_keys`), in place."""
    st, pt = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    if st.is_file():
        from safetensors.torch import load_file, save_file

        save_file(_peft_keys(load_file(str(st))), str(st), metadata={"format": "pt"})
    elif pt.is_file():
        torch.save(_peft_keys(torch.load(pt, weights_only=True)), pt)


def _bbb_state(saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of :func:`_peft_state` on a saved adapter: a mean saved under peft's key (``weight``
    beside a ``weight_rho``) back under bbb's (``weight_mu``), for peft's key mapping."""
    out = {}
    for k, v in saved.items():
        head, _, last = k.rpartition(".")
        if last in ("weight", "bias") and f"{k}_rho" in saved:
            k = f"{head}.{last}_mu"
        out[k] = v
    return out


class _BayesPeftModel:
    """bbb's additions to a peft model made Bayesian (a mixin of its class)."""

    def save_pretrained(self, save_directory: str, *args: Any, selected_adapters: list[str] | None = None,
                        **kwargs: Any) -> None:
        """peft's ``save_pretrained`` (adapters only), the posterior with it, and per adapter the
        conversion record ``bbb_conversion.json`` (and a mark in ``adapter_config.json``)."""
        record_path = Path(save_directory) / CONVERSION_FILE
        if record_path.is_file() and json.loads(record_path.read_text()).get("kind") != "lora":
            raise UserError(f"{save_directory} holds a whole Bayesian model (bbb.save_pretrained): the adapter saved "
                            f"there would overwrite its {CONVERSION_FILE}; save the adapter to another folder")
        super().save_pretrained(save_directory, *args, selected_adapters=selected_adapters, **kwargs)  # type: ignore[misc]
        if not kwargs.get("is_main_process", True):
            return  # peft wrote nothing
        adapters = list(self.peft_config) if selected_adapters is None else list(selected_adapters)  # type: ignore[attr-defined]
        for adapter, folder in _adapter_folders(save_directory, adapters):
            _rewrite_saved(folder)
            record = lora_record(self, adapter)  # type: ignore[arg-type]
            (folder / CONVERSION_FILE).write_text(json.dumps(record, indent=1) + "\n")
            cfg_path = folder / ADAPTER_CONFIG
            cfg = json.loads(cfg_path.read_text())
            cfg[CONFIG_MARK] = (f"Bayesian LoRA ({record['lora']}) by bbb: peft loads the posterior means; "
                                "bbb.from_pretrained(folder, base_model=...) the posterior")
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    def load_adapter(self, model_id: str, adapter_name: str, *args: Any, key_mapping: dict[str, str] | None = None,
                     **kwargs: Any) -> Any:
        """peft's ``load_adapter``; into an adapter of this model that is Bayesian already (transformers'
        ``Trainer`` resuming from a checkpoint, or loading its best one) each saved mean goes back
        under bbb's key (``X.weight`` -> ``X.weight_mu``: peft's own mapping would leave it unloaded),
        and a Bayesian parameter the folder does not hold is a one-line error. A new adapter is
        peft's plain one: from a Bayesian adapter's folder, its posterior means, with a warning."""
        new = adapter_name not in self.peft_config  # type: ignore[attr-defined]
        mapping = {} if new else _mean_key_mapping(self, adapter_name)  # type: ignore[arg-type]
        masks: set[str] = set()
        if mapping:  # a pruned adapter's masks: peft loads a saved key only onto a key the model has
            layers = [m for n, m in self.named_modules()  # type: ignore[attr-defined]
                      if isinstance(m, BayesModule) and _without_adapter(n, adapter_name) is not None]
            had = {k for k, _ in self.named_buffers() if k.endswith("_mask")}  # type: ignore[attr-defined]
            masks = _expect_masks(self, layers, _saved_keys(Path(model_id) / kwargs.get("subfolder", ""))) - had  # type: ignore[arg-type]
        if key_mapping:
            mapping = {**key_mapping, **mapping}
        result = super().load_adapter(model_id, adapter_name, *args, key_mapping=mapping or None,  # type: ignore[misc]
                                      **kwargs)
        for k in [k for k in result.missing_keys if k in masks]:  # a layer the pruning left without a mask
            module, _, buffer = k.rpartition(".")
            delattr(self.get_submodule(module), buffer)  # type: ignore[attr-defined]
            result.missing_keys.remove(k)
        missing = [k for k in result.missing_keys if _without_adapter(k, adapter_name) is not None
                   and k.endswith(("_mu", "_rho"))]
        if mapping and missing:
            raise UserError(f"the adapter in {model_id} did not load into the Bayesian adapter {adapter_name!r}: "
                            f"{len(missing)} posterior key(s) missing ({', '.join(missing[:2])}); a plain LoRA "
                            "adapter's folder? load it into a model that is not Bayesian")
        if new and (Path(model_id) / kwargs.get("subfolder", "") / CONVERSION_FILE).is_file():
            warnings.warn(f"load_adapter: {model_id} holds a Bayesian LoRA adapter, loaded as the new adapter "
                          f"{adapter_name!r} the way peft loads it: a plain LoRA adapter at the posterior means "
                          "(sigma dropped); bbb.from_pretrained(folder, base_model=..., adapter_name=...) loads "
                          "the posterior", UserWarning, stacklevel=2)
        return result


def _saved_keys(folder: Path) -> dict[str, Any]:
    """The keys of the adapter file in ``folder`` (read without the tensors where it is safetensors;
    none for a folder not on this machine)."""
    st, pt = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    if st.is_file():
        from safetensors import safe_open

        with safe_open(str(st), framework="pt") as f:
            return dict.fromkeys(f.keys())
    return torch.load(pt, weights_only=True, map_location="cpu") if pt.is_file() else {}


def _mean_key_mapping(model: nn.Module, adapter_name: str) -> dict[str, str]:
    """peft's ``key_mapping`` (a regular expression on the saved key, without its ``base_model.model.``
    prefix -> the key to load) that puts every posterior mean of adapter ``adapter_name`` back under
    bbb's key: the inverse of :func:`_peft_keys`, name by name."""
    from peft.utils import get_peft_model_state_dict

    # (save_embedding_layers=False: "auto" would look the base model up on the Hub; its keys are not ours)
    keys = list(get_peft_model_state_dict(model, adapter_name=adapter_name, save_embedding_layers=False))
    out = {}
    for k in _peft_keys(dict.fromkeys(keys, torch.empty(0))):  # the saved names of the model's keys
        if f"{k}_mu" not in keys:
            continue
        prefix = "base_model.model." if k.startswith("base_model.model.") else "base_model." \
            if k.startswith("base_model.") else ""
        out[f"^{re.escape(k.removeprefix(prefix))}$"] = f"{k.removeprefix(prefix)}_mu"
    return out


_MERGE_NOTE = ("{what}: the Bayesian LoRA adapters are merged at their posterior mean (the weights' sigma is "
               "dropped): the merged model is {result}")
_MERGED = {False: "one deterministic network, not the posterior",
           True: "the adapters' mean network, its head (modules_to_save=True) still Bayesian"}


class _BayesTuner:
    """bbb's additions to peft's tuner (``LoraModel``): merging says that it merges the posterior mean."""

    def merge_adapter(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(_MERGE_NOTE.format(what="merge_adapter", result=_MERGED[_bayes_head(self)]), UserWarning,
                      stacklevel=2)
        super().merge_adapter(*args, **kwargs)  # type: ignore[misc]

    def _unload_and_optionally_merge(self, merge: bool = True, *args: Any, **kwargs: Any) -> Any:
        if merge:
            warnings.warn(_MERGE_NOTE.format(what="merge_and_unload", result=_MERGED[_bayes_head(self)]), UserWarning,
                          stacklevel=3)
        return super()._unload_and_optionally_merge(merge, *args, **kwargs)  # type: ignore[misc]


def _bayes_head(tuner: Any) -> bool:
    """Whether a copy peft trains of ``modules_to_save`` (the head) is Bayesian: merging keeps it."""
    return any(isinstance(m, BayesModule) and ".modules_to_save." in f".{n}." for n, m in tuner.named_modules())


def load_pretrained(folder: str | Path, base_model: nn.Module, adapter_name: str = "default",
                    is_trainable: bool = False, *, bayesianize: Callable[..., nn.Module]) -> nn.Module:
    """The Bayesian LoRA model a peft model's ``save_pretrained`` wrote to ``folder`` (an adapter
    folder with ``bbb_conversion.json``), on ``base_model`` (a fresh copy of the model it adapts):
    the adapter added as peft does, converted as recorded, every posterior loaded exact. In ``eval()``
    mode; ``is_trainable=False`` (peft's default) freezes the adapter. Called by
    :func:`bbb.from_pretrained` (``base_model=``), which passes :func:`bbb.bayesianize` (this module sits
    below :mod:`bbb.convert`)."""
    from peft import PeftConfig, get_peft_model
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    from .distributions import prior_from_config
    from .nn.base import Estimator

    src = Path(folder)
    rec_path = src / CONVERSION_FILE
    if not rec_path.is_file():
        raise UserError(f"{src} holds a LoRA adapter without {CONVERSION_FILE}: a plain peft adapter, load it with "
                        "peft.PeftModel.from_pretrained (then bbb.bayesianize to make it Bayesian)")
    record = json.loads(rec_path.read_text())
    if record.get("format") != _FORMAT or record.get("kind") != "lora":
        raise UserError(f"{rec_path} is no Bayesian LoRA record of format {_FORMAT} (kind {record.get('kind')!r}, "
                        f"format {record.get('format')!r})")
    with warnings.catch_warnings():  # peft's note that it ignores bbb's mark in the config
        warnings.filterwarnings("ignore", message=rf".*{CONFIG_MARK}.*")
        config = PeftConfig.from_pretrained(str(src))
    config.inference_mode = not is_trainable
    layers: dict[str, dict[str, Any]] = record["layers"]
    first = next(iter(layers.values()), {})
    if any(v.get("prior") is None for v in layers.values()):
        raise UserError(f"{rec_path} could not record the prior (a torch.distributions one?); load with peft and "
                        "bbb.bayesianize, then load_state_dict")
    try:
        model = get_peft_model(base_model, config, adapter_name=adapter_name)
    except ValueError as e:  # peft: the adapter's target modules are not in this model
        raise UserError(f"the LoRA adapter in {src} does not fit this base model ({type(base_model).__name__}): "
                        f"{str(e).splitlines()[0]} (pass a fresh copy of the model it was trained on)") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        bayesianize(model, prior=prior_from_config(first["prior"]), estimator=first.get("estimator", "reparam"),
                    lora=record["lora"], modules_to_save=record["modules_to_save"])
    made = {}
    for name, m in model.named_modules():
        key = _without_adapter(name, adapter_name) if isinstance(m, BayesModule) else None
        if key is not None:
            made[key] = m
    if set(made) != set(layers):
        diff = sorted(set(made) ^ set(layers))[:3]
        raise UserError(f"the LoRA adapter in {src} does not fit this base model: layers {', '.join(diff)} differ "
                        "(pass a fresh copy of the model it was trained on)")
    for name, spec in layers.items():  # each layer's own settings, as recorded
        m = made[name]
        m.prior = prior_from_config(spec["prior"])
        m.estimator = Estimator(spec["estimator"])
        m.rho_init = float(spec["rho_init"])
    weights = _bbb_state(load_peft_weights(str(src)))
    masks = _expect_masks(model, made.values(), weights)
    try:
        result: Any = set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
    except RuntimeError as e:  # torch's load_state_dict: another shape (a base model of another size)
        why = next((line.strip() for line in str(e).splitlines() if "size mismatch" in line), str(e).splitlines()[0])
        raise UserError(f"the LoRA adapter in {src} does not fit this base model: {why} (pass a fresh copy of the "
                        "model it was trained on)") from None
    missing = [k for k in result.missing_keys if _without_adapter(k, adapter_name) is not None]
    for k in [k for k in missing if k in masks]:  # a layer the pruning left without a mask
        module, _, buffer = k.rpartition(".")
        delattr(model.get_submodule(module), buffer)
        missing.remove(k)
    unexpected = [k for k in result.unexpected_keys]
    if missing or unexpected:
        raise UserError(f"the adapter in {src} did not load exact: {len(missing)} missing key(s) "
                        f"({', '.join(missing[:2])}), {len(unexpected)} unexpected ({', '.join(unexpected[:2])})")
    return model.eval()


def _expect_masks(model: nn.Module, layers: Iterable[BayesModule], saved: dict[str, torch.Tensor]) -> set[str]:
    """A pruned adapter (:mod:`bbb.prune`; its masks saved as ``..._mask``): a mask of ones on every
    posterior of ``layers`` of the kinds the saved state has masks for, as peft loads a saved key only
    onto a key the model has already; returns these masks' ``state_dict`` keys."""
    kinds = {k.rpartition(".")[2] for k in saved if k.endswith("_mask")}
    if not kinds:
        return set()
    ids = {id(m) for m in layers}
    keys = set()
    for module_name, m in model.named_modules():
        if id(m) not in ids or not isinstance(m, BayesModule):
            continue
        for name in m.param_names():
            if f"{name}_mask" in kinds:
                if getattr(m, f"{name}_mask", None) is None:
                    m.register_buffer(f"{name}_mask", torch.ones_like(m.mu(name)))
                keys.add(f"{module_name}.{name}_mask")
    return keys


#: rho's learning rate over the means' that the docs recommend for a Bayesian LoRA fine-tune with Adam
#: (bench/lora_sigma.py: at 1x sigma barely leaves its initial value in 500 steps)
LORA_RHO_LR_SCALE = 10.0


def optim_groups(model: nn.Module, lr: float, rho_lr_scale: float = LORA_RHO_LR_SCALE) -> list[dict[str, Any]]:
    """``torch.optim`` parameter groups of ``model``'s trainable parameters: every posterior's rho at
    ``lr * rho_lr_scale``, the rest (the means, ``lora_B``, the head) at ``lr`` (what
    ``bbb.Engine(..., rho_lr_scale=)`` does). Frozen parameters are left out.

    >>> opt = torch.optim.AdamW(bbb.lora.optim_groups(model, lr=1e-3), weight_decay=0.0)
    """
    rhos = {id(m.rho(n)) for m in model.modules() if isinstance(m, BayesModule) for n in m.param_names()}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if id(p) not in rhos], "lr": float(lr)},
              {"params": [p for p in params if id(p) in rhos], "lr": float(lr) * float(rho_lr_scale)}]
    return [g for g in groups if g["params"]]


# ------------------------------------------------------------------------------------------------
# An adapter still at peft's init (B = 0): every sample is the base model
# ------------------------------------------------------------------------------------------------

def untrained_adapters(model: nn.Module) -> list[str]:
    """The LoRA layers (qualified names, with the adapter) whose active adapter has a Bayesian A and a
    deterministic B that is exactly 0 (peft's init): the samples of A all give the base model."""
    return list(_untrained(model))


def _untrained(model: nn.Module) -> dict[str, BayesModule]:
    """:func:`untrained_adapters`, each with its Bayesian A."""
    out = {}
    for name, layer in lora_layers(model):
        As: Any = layer.lora_A
        Bs: Any = layer.lora_B
        for key in getattr(layer, "active_adapters", []):
            a, b = As[key] if key in As else None, Bs[key] if key in Bs else None
            if isinstance(a, BayesModule) and b is not None and not isinstance(b, BayesModule):
                w = getattr(b, "weight", None)
                if isinstance(w, torch.Tensor) and not bool(w.detach().any()):
                    out[f"{name} ({key})"] = a
    return out


def _merged(model: nn.Module) -> list[str]:
    """The peft LoRA layers of ``model`` with a Bayesian adapter merged into their base weight
    (``merge_adapter``): their forward no longer calls the adapter, so nothing of it is sampled."""
    out = []
    for name, layer in lora_layers(model):
        adapters: Any = layer.lora_A
        bs: Any = layer.lora_B
        bayes = [k for k in getattr(layer, "merged_adapters", []) if k in adapters and
                 (isinstance(adapters[k], BayesModule) or isinstance(bs[k], BayesModule))]
        out += [f"{name} ({k})" for k in bayes]
    return out


def warn_untrained(model: nn.Module, who: str) -> None:
    """Warn when a Bayesian-A adapter of ``model`` is untrained (B = 0): its samples of A then change
    nothing, and where no other Bayesian layer samples, ``who``'s samples are equal; and when a
    Bayesian adapter is merged into its base weight (``merge_adapter``): nothing of it is sampled."""
    if not _peft_lora_layer():
        return
    merged = _merged(model)
    if merged:
        more = f" and {len(merged) - 3} more" if len(merged) > 3 else ""
        warnings.warn(f"{who}: the Bayesian LoRA adapter is merged into the base weights (merge_adapter) in "
                      f"{', '.join(merged[:3])}{more}: the forward no longer calls it, so none of its weights is "
                      "sampled (the merge holds its means); call model.unmerge_adapter() first", UserWarning,
                      stacklevel=3)
    found = _untrained(model)
    if found:
        left = list(found)
        more = f" and {len(left) - 3} more" if len(left) > 3 else ""
        ids = {id(a) for a in found.values()}
        others = any(id(m) not in ids for m in bayes_modules(model, active=True))
        what = ("the samples differ only through the model's other Bayesian layers (the head, another B)" if others
                else "every sample is the base model, so the samples are identical")
        warnings.warn(f"{who}: the LoRA adapter's B is 0 (peft's init, untrained) in {', '.join(left[:3])}{more}: "
                      f"with A Bayesian and B = 0 a sample of A changes nothing there, and {what} until training "
                      "moves B", UserWarning, stacklevel=3)
