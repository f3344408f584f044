# conftest.py — the Python tests' fixtures: the package from the source tree, the CLI, checkpoints.
"""ctest runs these tests with LIBMOE_LIBRARY (the shared library just built) and MOE_CLI (the
moe tool, which generates the small checkpoints). Run by hand, both default to build/."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if not os.environ.get("LIBMOE_LIBRARY"):
    os.environ["LIBMOE_LIBRARY"] = os.path.join(ROOT, "build", "libmoe.so")
MOE_CLI = os.environ.get("MOE_CLI") or os.path.join(ROOT, "build", "moe")

# Small shapes: every family's real tensor names and formats, a forward in milliseconds.
GEN_SHAPE = ["--layers", "2", "--hidden", "128", "--intermediate", "64", "--experts", "8",
             "--topk", "2", "--vocab", "512"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run the moe tool; fail the test with its stderr when it fails."""
    p = subprocess.run([MOE_CLI, *args], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail("moe %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p


@pytest.fixture(scope="session")
def model(checkpoint: Callable[..., str]) -> Iterator[Any]:
    """The generated DeepSeek-V3 FP8 model (layer 0 dense, layer 1 MoE with a shared expert),
    open for the whole session."""
    import libmoe  # after LIBMOE_LIBRARY is set above

    with libmoe.open(checkpoint("deepseek_v3", "fp8")) as m:
        yield m


@pytest.fixture(scope="session")
def layer(model: Any) -> Any:
    """Layer 1 of ``model``, created once per session."""
    return model.layer(1)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """checkpoint(family, dtype=None, *extra gen options) -> the folder of a generated model
    (made once per session and arguments)."""
    made: Dict[Tuple[str, ...], str] = {}

    def make(family: str, dtype: str = "", *extra: str) -> str:
        key = (family, dtype) + extra
        if key not in made:
            d = tmp_path_factory.mktemp("%s_%s" % (family, dtype or "default"))
            args = ["gen", "--family", family, "--out", str(d), *GEN_SHAPE, *extra]
            if dtype:
                args += ["--dtype", dtype]
            run_cli(*args)
            made[key] = str(d)
        return made[key]

    return make


@pytest.fixture(scope="session")
def hf_saved(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], str]:
    """hf_saved(family, dtype) -> the folder of hf_util's tiny random FAMILY model saved by
    transformers' save_pretrained in DTYPE ('bf16', 'f16' or 'f32'), made once per session
    (the model is seeded: the same weights every time)."""
    import hf_util  # torch and transformers: only the tests that use it import them

    made: Dict[Tuple[str, str], str] = {}

    def make(family: str, dtype: str) -> str:
        if (family, dtype) not in made:
            folder = tmp_path_factory.mktemp("hf_%s_%s" % (family, dtype))
            made[family, dtype] = hf_util.save(hf_util.make_model(family), folder, dtype)
        return made[family, dtype]

    return make


@pytest.fixture(scope="session")
def hf_gen(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], str]:
    """hf_gen(family, dtype) -> the folder of a `moe gen` checkpoint in the hf tests' shape
    (hf_util.gen), made once per session."""
    import hf_util

    made: Dict[Tuple[str, str], str] = {}

    def make(family: str, dtype: str) -> str:
        if (family, dtype) not in made:
            folder = tmp_path_factory.mktemp("hfgen_%s_%s" % (family, dtype))
            made[family, dtype] = hf_util.gen(folder, family, dtype)
        return made[family, dtype]

    return make
