# test_pip_install.py — `pip install <repository>` (the real scikit-build-core build) into a scratch venv.
"""Slow: pip compiles the C library again. Marked `pip` (ctest test python_pip, label pip)."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest

from reference import Checkpoint, LayerRef, rel_error

pytestmark = pytest.mark.pip
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_then_forward(tmp_path, checkpoint):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # The test venv's packages (numpy, pip, scikit-build-core) seen from the scratch venv,
    # which is what --system-site-packages would give if the test venv were the system.
    with open(os.path.join(site, "test-venv.pth"), "w") as f:
        f.write("%s\n%s\n" % (sysconfig.get_path("purelib"), sysconfig.get_path("platlib")))
    env = {k: v for k, v in os.environ.items() if k not in ("LIBMOE_LIBRARY", "PYTHONPATH")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    p = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", ROOT],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]

    d = checkpoint("deepseek_v3", "fp8")
    code = textwrap.dedent("""
        import sys, numpy as np, libmoe
        assert libmoe.__file__.startswith(sys.argv[2]), libmoe.__file__
        x = np.load(sys.argv[3])
        with libmoe.open(sys.argv[1]) as model:
            np.save(sys.argv[4], model.layer(1)(x))
    """)
    x = np.random.default_rng(12).standard_normal((3, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    p = subprocess.run([py, "-c", code, d, site, str(tmp_path / "x.npy"),
                        str(tmp_path / "y.npy")], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    want, _ = LayerRef(Checkpoint(d), 1).forward(x.astype(np.float64))
    assert rel_error(np.load(tmp_path / "y.npy"), want) <= 1e-5
