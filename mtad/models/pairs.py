"""Target/draft pairs: read `conf/pair/<name>.yaml`, load both models and one tokenizer.

pair = load_pair("smollm2_135m", device="cpu", target_dtype="bfloat16")
pair.target, pair.draft, pair.tokenizer, pair.eos_token_id, pair.name, pair.config, pair.decode_path
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from mtad.provenance import dtype_name

from .dtype_choice import DTYPES, measure, pinned_choice, stored_choice

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # mtad/
ASSETS_DIR = PACKAGE_DIR / "assets"
SOURCES = ("hub", "gguf_package", "tiny_random", "distilled", "head", "lookup")
# targets only, in CPU weight-only kernels with float32 or bf16 activations (models/quantized.py): the GGUF's
# 4-bit weights in the int4 kernel (q4_1), every Linear of the dense target requantized per row to int8 (int8)
QUANTIZED_DTYPES = ("q4_1", "q4_1_bf16", "int8", "int8_bf16")
QUANTIZED_SOURCES = {"q4_1": ("gguf_package", "tiny_random"), "int8": ("gguf_package", "tiny_random", "hub")}
AUTO_DTYPE = "auto"  # on a CPU the cheaper dtype measured on the machine (dtype_choice.py); on CUDA a rule


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in info.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX-512 BF16 or AMX), so that bf16 products run
    at half float32's bytes without converting on the fly."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def auto_dtype(device: torch.device) -> str:
    """The device's rule for `auto` where nothing is measured: on CUDA bf16 where supported, else
    float16; on a CPU bf16 where it multiplies bf16 natively, else float32. A pair's CPU target is
    not ruled but measured (`dtype_choice`); the rule serves CUDA and the draft trainer's compute."""
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if device.type == "cpu" and native_bf16_cpu():
        return "bfloat16"
    return "float32"


def pair_conf_dir() -> Path:
    """The ``pair`` group of the configs (``mtad.configs.conf_dir``)."""
    from mtad.configs import conf_dir

    return conf_dir() / "pair"


def list_pairs() -> list[str]:
    return sorted(p.stem for p in pair_conf_dir().glob("*.yaml"))


def pair_config(name_or_cfg: str | Mapping, **overrides) -> dict:
    """The resolved pair config as a plain dict, overrides applied to top-level keys."""
    if isinstance(name_or_cfg, str):
        if not (pair_conf_dir() / f"{name_or_cfg}.yaml").is_file():
            raise KeyError(
                f"unknown pair {name_or_cfg!r}; valid pairs: {', '.join(list_pairs())} (in {pair_conf_dir()})"
            )
        from mtad.configs import group_option

        cfg = group_option("pair", name_or_cfg)
    else:
        try:
            from omegaconf import DictConfig, OmegaConf

            cfg = (
                OmegaConf.to_container(name_or_cfg, resolve=True)
                if isinstance(name_or_cfg, DictConfig)
                else copy.deepcopy(dict(name_or_cfg))
            )
        except ImportError:  # pragma: no cover
            cfg = copy.deepcopy(dict(name_or_cfg))
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "dtype":  # shorthand for both models
            cfg["target_dtype"] = cfg["draft_dtype"] = value
        elif key == "draft_file":
            cfg.setdefault("draft", {})["file"] = value
        else:
            cfg[key] = value
    resolve_auto_dtypes(cfg)
    from mtad.decoding.static_kv import DECODE_PATHS

    if cfg.get("decode_path", "fast") not in DECODE_PATHS:
        raise ValueError(
            f"pair {cfg.get('name')!r}: decode_path must be one of {DECODE_PATHS}, got {cfg['decode_path']!r}"
        )
    if cfg.get("target_dtype") not in (None, AUTO_DTYPE, *DTYPES, *QUANTIZED_DTYPES):
        raise ValueError(
            f"pair {cfg.get('name')!r}: unknown dtype {cfg['target_dtype']!r} for the target; "
            f"valid: {', '.join([*DTYPES, *QUANTIZED_DTYPES, AUTO_DTYPE])}"
        )
    for part in ("target", "draft"):
        source = (cfg.get(part) or {}).get("source")
        if source not in SOURCES:
            raise ValueError(f"pair {cfg.get('name')!r}: {part}.source must be one of {SOURCES}, got {source!r}")
    return cfg


def resolve_auto_dtypes(cfg: dict) -> None:
    """Resolve `auto` dtypes in place. A target's `auto` pinned by ``MTAD_TARGET_DTYPE``
    (`dtype_choice.pinned_choice`) is the pinned dtype on any device; else on CUDA it is the
    device's rule (`auto_dtype`), and on a CPU this machine's measurement (`dtype_choice.stored_choice`;
    without one it stays `auto` until `load_pair` measures it). A pinned or measured choice is
    recorded under ``dtype_choice``. A draft's `auto` is the device's rule on CUDA, else the target's
    dtype (a 4-bit target's activations' dtype), once that is known."""
    device = resolve_device(cfg.get("device"))
    if cfg.get("target_dtype") == AUTO_DTYPE:
        choice = pinned_choice()
        if choice is None and device.type == "cpu":
            choice = stored_choice(cfg["target"], cfg.get("decode_path"))
        if choice is not None:
            cfg["target_dtype"], cfg["dtype_choice"] = choice.dtype, choice.as_dict()
        elif device.type != "cpu":
            cfg["target_dtype"] = auto_dtype(device)
    if cfg.get("draft_dtype") == AUTO_DTYPE:
        if device.type != "cpu":
            cfg["draft_dtype"] = auto_dtype(device)
        elif cfg.get("target_dtype") in (*DTYPES, *QUANTIZED_DTYPES):
            cfg["draft_dtype"] = activation_dtype(cfg.get("target_dtype"))


def auto_meaning(cfg: Mapping) -> str | None:
    """What `auto` would make of the pair's target here: the pinned dtype (``MTAD_TARGET_DTYPE``), else
    this machine's measured (or the device's ruled) dtype; None on a CPU where no load has measured it yet."""
    resolved = pair_config({**cfg, "target_dtype": AUTO_DTYPE})["target_dtype"]
    return None if resolved == AUTO_DTYPE else resolved


def activation_dtype(target_dtype: str | None) -> str:
    """The dense dtype a target of `target_dtype` computes in (a 4-bit target's activations')."""
    return dtype_name(_dtype(target_dtype, QUANTIZED_DTYPES))


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _dtype(name: str | None, quantized: tuple[str, ...] = ()) -> torch.dtype:
    """The torch dtype a model is built in; a quantized name (`quantized` lists those allowed) is
    built in its kernels' activation dtype, then quantized."""
    if name is None:
        return torch.float32
    if name in quantized:
        from .quantized import KERNEL_DTYPES

        return KERNEL_DTYPES[name]
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join([*DTYPES, *quantized])}")
    return DTYPES[name]


def _check_quantized(cfg: dict, name: str) -> None:
    """Refuse a quantized target dtype where its CPU kernels cannot run, before anything loads."""
    if resolve_device(cfg.get("device")).type != "cpu" or cfg.get("device_map"):
        raise ValueError(f"target_dtype {name} runs on CPU kernels only; set device=cpu and device_map=null")
    source, sources = cfg["target"]["source"], QUANTIZED_SOURCES[name.removesuffix("_bf16")]
    if source not in sources:
        raise ValueError(f"target_dtype {name} needs a {' or '.join(sources)} target, not {source!r}")


def _quantized_target(model, spec: dict, name: str):
    """The dense float32 target carried into the int4/int8 CPU kernels (pair.target_dtype=`name`):
    for q4_1 the GGUF's own Q4_1/Q8_0 blocks for a gguf_package target, gguf's quantizer for a tiny
    random one; for int8 every Linear requantized per row (`quantized.quantize`)."""
    from .quantized import KERNEL_DTYPES, load_gguf_q4_1, quantize

    if spec["source"] == "gguf_package" and name.startswith("q4_1"):
        from .gguf_cache import find_gguf

        gguf = find_gguf(spec["package"], str(spec["version"]), spec["file"])
        return load_gguf_q4_1(model, gguf, KERNEL_DTYPES[name])
    return quantize(model, name)


def _hub_kwargs(cfg: dict, dtype: torch.dtype) -> dict:
    kwargs = {"dtype": dtype}
    if cfg.get("device_map"):
        kwargs["device_map"] = cfg["device_map"]
    return kwargs


def _place(model, cfg: dict):
    return model if cfg.get("device_map") else model.to(resolve_device(cfg.get("device")))


def load_target_and_tokenizer(cfg: dict, device: str | None = None, dtype: str | None = None):
    """The target model (eval mode) and the pair's tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = dict(cfg, device=device or cfg.get("device"))
    dtype_name = dtype or cfg.get("target_dtype")
    if dtype_name == AUTO_DTYPE:  # a CPU target not measured on this machine yet: float32, then timed
        model, tokenizer = load_target_and_tokenizer(cfg, dtype="float32")
        model, choice = measure(model, cfg["target"], cfg.get("decode_path"))
        model.mtad_dtype_choice = choice.as_dict()  # what load_pair records
        return model, tokenizer
    torch_dtype = _dtype(dtype_name, QUANTIZED_DTYPES)
    if dtype_name in QUANTIZED_DTYPES:
        _check_quantized(cfg, dtype_name)
        torch_dtype = torch.float32  # loaded dense in float32, then quantized (`_quantized_target`)
    spec = cfg["target"]
    if spec["source"] == "gguf_package":
        from .gguf_cache import ensure_converted

        # keyed by the GGUF file, not the pair: pairs that share a target share one conversion
        local = ensure_converted(Path(spec["file"]).stem, spec["package"], str(spec["version"]), spec["file"])
        model = AutoModelForCausalLM.from_pretrained(str(local), **_hub_kwargs(cfg, torch_dtype))
        tokenizer = AutoTokenizer.from_pretrained(str(cfg.get("tokenizer") or local))
    elif spec["source"] == "hub":
        model = AutoModelForCausalLM.from_pretrained(spec["id"], **_hub_kwargs(cfg, torch_dtype))
        tokenizer = AutoTokenizer.from_pretrained(cfg.get("tokenizer") or spec.get("tokenizer") or spec["id"])
    elif spec["source"] == "tiny_random":
        from .tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer(spec.get("tokenizer", "default"))
        model = tiny_model(
            spec.get("family", "llama"), len(tokenizer), int(spec.get("seed", 0)), **spec.get("overrides", {})
        )
        model = model.to(torch_dtype)
    else:
        raise ValueError(f"target.source {spec['source']!r} is not valid for a target")
    if dtype_name in QUANTIZED_DTYPES:
        model = _quantized_target(model, spec, dtype_name)
    return _place(model, cfg).eval(), tokenizer


def load_draft_model(cfg: dict, target, dtype: str | None = None):
    """The draft model (eval mode) and its own tokenizer when it has one (None if shared)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or cfg.get("draft_dtype")
    torch_dtype = target.dtype if dtype == AUTO_DTYPE else _dtype(dtype)  # `auto`: the target's
    spec = cfg["draft"]
    # drafts that copy from the context (mtad/decoding/lookup.py); `model`: the spec of a draft (any other
    # source) for the blocks where no n-gram recurs, null for none; `model_above`: see LOOKUP_KEYS
    if spec["source"] == "lookup":
        from mtad.decoding.lookup import PromptLookup

        inner = spec.get("model")
        model, tokenizer = load_draft_model({**cfg, "draft": inner}, target, dtype) if inner else (None, None)
        return PromptLookup(
            spec.get("max_ngram", 3), spec.get("min_ngram", 1), model, spec.get("model_above")
        ), tokenizer
    if spec["source"] == "distilled":
        from .draft import load_draft

        path = draft_file(cfg)
        return load_draft(path, target, dtype=torch_dtype).to(next(target.parameters()).device), None
    if spec["source"] == "head":
        from .head import build_head, load_eagle_head, load_head

        if spec.get("format") == "eagle":  # a published EAGLE-1 head: hub id or local directory
            return load_eagle_head(spec["id"], target, dtype=torch_dtype).to(next(target.parameters()).device), None
        device = next(target.parameters()).device
        if spec.get("file") is None:  # a random head (tests): fusion and layer(s) from `seed`
            head = build_head(target, int(spec.get("num_layers", 1)), seed=int(spec.get("seed", 1))).to(torch_dtype)
            return head.to(device).eval(), None
        return load_head(draft_file(cfg), target, dtype=torch_dtype).to(device), None
    if spec["source"] == "hub":
        model = AutoModelForCausalLM.from_pretrained(spec["id"], **_hub_kwargs(cfg, torch_dtype))
        tokenizer = AutoTokenizer.from_pretrained(spec.get("tokenizer") or spec["id"])
        return _place(model, cfg).eval(), tokenizer
    if spec["source"] == "tiny_random":
        from .tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer(spec.get("tokenizer", "default"))
        model = tiny_model(
            spec.get("family", "llama"), len(tokenizer), int(spec.get("seed", 1)), **spec.get("overrides", {})
        ).to(torch_dtype)
        return _place(model, cfg).eval(), tokenizer
    raise ValueError(f"draft.source {spec['source']!r} is not valid for a draft")


def check_same_tokenizer(target_tok, draft_tok, pair_name: str = "") -> None:
    """Refuse a pair whose tokenizers differ: same vocabulary (token -> id) and same EOS."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    if tv != dv:
        only_t = sorted(set(tv) - set(dv))[:5]
        only_d = sorted(set(dv) - set(tv))[:5]
        moved = [t for t in set(tv) & set(dv) if tv[t] != dv[t]][:5]
        raise ValueError(
            f"pair {pair_name!r}: draft and target tokenizers differ (vocabulary sizes {len(tv)} vs {len(dv)}; "
            f"only in target: {only_t}; only in draft: {only_d}; different ids: {moved}). "
            "Speculative decoding needs one shared vocabulary."
        )
    if target_tok.eos_token_id != draft_tok.eos_token_id:
        raise ValueError(f"pair {pair_name!r}: EOS ids differ ({target_tok.eos_token_id} vs {draft_tok.eos_token_id})")


def logit_width(model) -> int:
    """How many ids a model's logits cover (a restricted-head draft still covers the full vocabulary)."""
    if hasattr(model, "expand_logits"):
        return model.config.vocab_size
    return model.get_output_embeddings().weight.shape[0]


def check_same_logit_space(target, draft, pair_name: str = "") -> None:
    """Both models must produce logits over the same ids."""
    vt, vd = logit_width(target), logit_width(draft)
    if vt != vd:
        raise ValueError(f"pair {pair_name!r}: target logits cover {vt} ids but the draft's cover {vd}")


def draft_file(cfg: dict) -> Path:
    """The pair's trained draft file (relative paths: under mtad/assets): it must exist, be a
    readable safetensors file and carry the metadata of the pair's draft kind (a feature head for
    draft.source head, a layer draft for distilled). Checked from the file's header alone."""
    path = Path(cfg["draft"]["file"]).expanduser()
    path = path if path.is_absolute() else ASSETS_DIR / path
    head = cfg["draft"]["source"] == "head"
    kind = "feature head" if head else "draft"
    if path.is_dir():
        raise ValueError(f"pair.draft.file={path} is a directory, not a {kind} file (.safetensors)")
    if not path.is_file():
        raise FileNotFoundError(
            f"{kind} file {path} not found; train it with `make draft DRAFT_PAIR={cfg.get('name')}` "
            f"(scripts/distill_draft.py produce|train|export --pair {cfg.get('name')}), or point "
            "pair.draft.file at an existing file"
        )
    from safetensors import SafetensorError

    from .draft import DRAFT_FORMAT, read_meta
    from .head import FORMATS

    try:
        read_meta(path, FORMATS if head else DRAFT_FORMAT, kind)
    except SafetensorError as exc:
        raise ValueError(
            f"pair.draft.file={path} is not a readable safetensors file (truncated or another format: {exc})"
        ) from None
    except ValueError as exc:
        other = "a layer draft (draft.source: distilled)" if head else "a feature head (draft.source: head)"
        raise ValueError(f"pair.draft.file: {exc}; a file of {other} belongs to a pair of that kind") from None
    return path


def check_device(device: str | None) -> None:
    """A device string torch knows and this torch build can use."""
    if device in (None, "auto"):
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"pair.device={device!r} is not a device; valid: auto, cpu, cuda, cuda:N") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise ValueError(
            f"pair.device={device}: this torch ({torch.__version__}, {build}) sees no CUDA GPU; use pair.device=cpu "
            "here, or run on a machine with a GPU and a CUDA build of torch"
        )
    if parsed.type not in ("cpu", "cuda"):
        raise ValueError(f"pair.device={device!r}: only cpu and cuda are supported")


HUB = ("huggingface.co", 443)  # the Hugging Face hub's address, probed before a download that would wait on it


class HubModelUnavailable(FileNotFoundError):
    """A pair's hub model that is neither a local folder nor in the Hugging Face cache, while the hub
    cannot be reached; the message (one line) names the id, where it was looked for and how to get it."""


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE says so (as huggingface_hub reads it: 1, true, yes or on)."""
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "TRUE", "YES", "ON"}


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached from here (HF_HUB_OFFLINE, or what a connection to
    it attempted for at most ``timeout_s`` met), or None when it answers."""
    import socket

    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    try:
        socket.create_connection(HUB, timeout=timeout_s).close()
        return None
    except OSError as exc:
        return str(exc) or type(exc).__name__


def hub_model_problem(model_id: str, part: str) -> str | None:
    """Why the hub model `model_id` cannot be loaded here (None when it can, or when that is only
    known by trying): a local folder that is not there, or an id that is neither a folder nor in the
    local Hugging Face cache while the hub cannot be reached (HF_HUB_OFFLINE, which `runner.offline`
    sets after its probe, or a short probe here). Checked before transformers, which would wait
    out its retries and then raise a long error."""
    folder = Path(model_id).expanduser()
    if folder.is_absolute() or model_id.startswith("."):
        return None if folder.is_dir() else f"pair.{part}.id={model_id}: no such folder"
    if folder.is_dir():  # transformers reads a relative folder of that name first
        return None
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        return None
    why = hub_unreachable()
    if why is None:
        return None  # online: transformers downloads it (or names the access it lacks)
    return (
        f"pair.{part}.id={model_id}: not on this machine (no folder {folder.absolute()}, not in the Hugging Face "
        f"cache {constants.HF_HUB_CACHE}) and the Hugging Face hub cannot be reached ({why}); run where it can "
        f"(the model is downloaded into that cache), or download it where there is network "
        f"(`hf download {model_id} --local-dir DIR`), copy DIR here and set pair.{part}.id=DIR"
    )


def check_hub_models(cfg: Mapping) -> None:
    """Every hub model of the pair (a `hub` source, an EAGLE head's id) can be loaded here, else
    HubModelUnavailable with one line (`hub_model_problem`)."""
    for part in ("target", "draft"):
        spec = cfg[part]
        if spec["source"] == "hub" or spec.get("format") == "eagle":
            problem = hub_model_problem(str(spec["id"]), part)
            if problem:
                raise HubModelUnavailable(problem)


def check_pair_settings(cfg: Mapping) -> dict:
    """Everything about a pair that can be checked without loading a model: names, dtypes and decode
    path (`pair_config`), the device and whether this torch can use it, the draft file, and hub
    models that cannot be reached. Raises ValueError / KeyError / FileNotFoundError with one line;
    returns the resolved config."""
    check_device((cfg or {}).get("device"))
    cfg = pair_config(cfg)
    if cfg.get("draft_dtype") not in (None, AUTO_DTYPE, *DTYPES):
        raise ValueError(
            f"pair {cfg.get('name')!r}: unknown dtype {cfg['draft_dtype']!r} for the draft; "
            f"valid: {', '.join([*DTYPES, AUTO_DTYPE])}"
        )
    if cfg["draft"]["source"] in ("distilled", "head") and cfg["draft"].get("file"):
        draft_file(cfg)
    if cfg["draft"]["source"] == "lookup":
        check_lookup_spec(cfg["draft"])
    check_hub_models(cfg)
    return cfg


# a lookup draft's keys: the n-gram lengths tried (longest first), the draft model or head after the
# copy (null: none), and the top probability of that model's q at a block's first position from
# which it drafts the block instead of the copy (null: never)
LOOKUP_KEYS = ("source", "max_ngram", "min_ngram", "model", "model_above")


def check_lookup_spec(spec: Mapping) -> None:
    """A lookup draft's keys and values, before anything loads (`lookup.check_lookup_settings`);
    ValueError with one line."""
    from mtad.decoding.lookup import check_lookup_settings

    unknown = sorted(set(spec) - set(LOOKUP_KEYS))
    if unknown:
        raise ValueError(f"draft.source lookup takes {', '.join(LOOKUP_KEYS[1:])}; unknown: {', '.join(unknown)}")
    check_lookup_settings(
        spec.get("max_ngram", 3), spec.get("min_ngram", 1), spec.get("model_above"), bool(spec.get("model"))
    )


@dataclass
class Pair:
    name: str
    target: Any
    draft: Any
    tokenizer: Any
    config: dict = field(default_factory=dict)

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    @property
    def decode_path(self) -> str:
        """How decoders run both models (get_decoder(..., decode_path=pair.decode_path))."""
        return self.config.get("decode_path") or "fast"


def load_pair(name_or_cfg: str | Mapping = "smollm2_135m", **overrides) -> Pair:
    """Load a pair by name (conf/pair/<name>.yaml) or from a config mapping; see the schema there.
    A hub model that is not on this machine while the hub cannot be reached raises
    HubModelUnavailable at once, before transformers would wait on the network."""
    cfg = pair_config(name_or_cfg, **overrides)
    name = cfg.get("name") or (name_or_cfg if isinstance(name_or_cfg, str) else "custom")
    cfg["name"] = name
    if cfg.get("target_dtype") in QUANTIZED_DTYPES:  # a setting is refused before any model is looked for
        _check_quantized(cfg, cfg["target_dtype"])
    check_hub_models(cfg)
    target, tokenizer = load_target_and_tokenizer(cfg)
    if cfg["target_dtype"] == AUTO_DTYPE:  # first load on this machine: the cheaper dtype, timed now
        cfg["dtype_choice"] = target.mtad_dtype_choice
        cfg["target_dtype"] = cfg["dtype_choice"]["target_dtype"]
        resolve_auto_dtypes(cfg)
    draft, draft_tokenizer = load_draft_model(cfg, target)
    if draft_tokenizer is not None:
        check_same_tokenizer(tokenizer, draft_tokenizer, name)
    from mtad.decoding.lookup import PromptLookup

    scorer = draft.model if isinstance(draft, PromptLookup) else draft  # the model giving q (none: lookup alone)
    if scorer is not None:
        check_same_logit_space(target, scorer, name)
    for model in (target, draft):
        model.eval()
        model.requires_grad_(False)
    return Pair(name=name, target=target, draft=draft, tokenizer=tokenizer, config=cfg)
