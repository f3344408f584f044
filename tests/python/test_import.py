# test_import.py — the package imports with numpy alone (torch blocked), its OpenMP runtime passive.
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT


def test_numpy_only(checkpoint):
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        sys.path.insert(0, sys.argv[1])
        import numpy as np
        import libmoe
        with libmoe.open(sys.argv[2]) as model:
            layer = model.layer(0)
        y, ids, w = layer(np.ones((2, model.info.hidden_size), np.float32), return_routing=True)
        assert y.shape == (2, model.info.hidden_size) and ids.shape == (2, 2)
        try:
            layer("not an array")
        except libmoe.InvalidArgumentError as e:
            assert "numpy.ndarray" in str(e)
        else:
            raise SystemExit("no error for a str")
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "python"),
                        checkpoint("mixtral", "bf16")], capture_output=True, text=True,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"


# libgomp prints its settings (omp_display_env, OpenMP 5.0; verbose: its own too) to stderr. It
# shows OMP_WAIT_POLICY 'PASSIVE' for "unset" too; what tells them apart is the spin count: 0 for
# PASSIVE, 300000 (spin, then sleep) when unset, larger for ACTIVE.
_SETTINGS = textwrap.dedent("""
    import ctypes, os, sys
    sys.path.insert(0, sys.argv[1])
    import libmoe
    print(os.environ.get("OMP_WAIT_POLICY", "unset"), flush=True)
    ctypes.CDLL("libgomp.so.1").omp_display_env(1)
""")


def _openmp(env: dict) -> tuple[str, str, str]:
    """The OMP_WAIT_POLICY the process sees after import, and libgomp's policy and spin count."""
    p = subprocess.run([sys.executable, "-c", _SETTINGS, os.path.join(ROOT, "python")],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    def setting(name: str) -> str:
        lines = [l.split("=", 1)[1].strip() for l in p.stderr.splitlines()
                 if l.strip().startswith(name + " =")]
        assert len(lines) == 1, p.stderr
        return lines[0]
    return p.stdout.strip(), setting("OMP_WAIT_POLICY"), setting("GOMP_SPINCOUNT")


def test_openmp_passive_unless_set():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    # libmoe's runtime sleeps at once; the process's environment is as it was.
    assert _openmp(env) == ("unset", "'PASSIVE'", "'0'")
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the caller's choice stands
    seen, policy, spin = _openmp(env)
    assert (seen, policy) == ("ACTIVE", "'ACTIVE'") and spin != "'0'"
