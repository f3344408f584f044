# test_import.py — the package imports and runs with numpy alone (torch blocked).
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
