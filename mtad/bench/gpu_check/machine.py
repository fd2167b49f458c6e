"""The machine a check runs on: why no CUDA device can be used here (`cuda_problem`, which makes a
run a dry run), and the record of the machine, python, libraries, GPUs and code state that every
report starts with."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys

NO_CUDA = "no CUDA device"


def cuda_problem() -> str | None:
    """Why no CUDA device can be used here (None when one can)."""
    try:
        import torch
    except Exception as err:  # noqa: BLE001 - a broken install is as good as none
        return f"{NO_CUDA}: torch is not importable ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        return f"{NO_CUDA}: torch.cuda.is_available() is False (torch {torch.__version__}, {build})"
    return None


def machine_record() -> dict:
    """The machine, python and library versions, the GPUs and the code state."""
    record = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "cpu_count": os.cpu_count(),
    }
    try:
        from mtad.provenance import cpu_model

        record["cpu"] = cpu_model()
    except Exception:  # noqa: BLE001 - the record is best effort
        record["cpu"] = platform.processor() or platform.machine()
    try:
        import torch

        record.update(torch=torch.__version__, cuda_build=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            record["cudnn"] = torch.backends.cudnn.version()
            record["gpus"] = [
                {
                    "index": i,
                    "name": torch.cuda.get_device_name(i),
                    "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
                    "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
                }
                for i in range(torch.cuda.device_count())
            ]
    except Exception as err:  # noqa: BLE001
        record["torch"] = None
        record["torch_problem"] = f"{type(err).__name__}: {err}"
    for name in ("transformers", "scipy"):
        try:
            record[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            record[name] = None
    record["pynvml"] = importlib.util.find_spec("pynvml") is not None
    if record["pynvml"] and record.get("gpus"):
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            record["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception as err:  # noqa: BLE001
            record["driver"] = f"unreadable ({type(err).__name__}: {err})"
    try:
        from mtad.provenance import git_commit

        git = git_commit()
        record["git"] = {k: git.get(k) for k in ("commit", "dirty")}
    except Exception as err:  # noqa: BLE001 - a copy of the tree without git
        record["git"] = f"unknown ({type(err).__name__}: {err})"
    return record
