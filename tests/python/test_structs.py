# test_structs.py — each ctypes struct has the C compiler's size and field offsets (include/moe.h).
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from libmoe import _lib
from conftest import ROOT


def c_layout(tmp_path):
    """{struct: (sizeof, {field: offsetof})} from a program the system compiler builds."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <moe.h>", "int main(void) {"]
    for cname, cls in _lib.STRUCTS.items():
        lines.append('printf("%s . %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));'
                         % (cname, field, cname, field))
    lines += ["return 0;", "}"]
    src, exe = tmp_path / "layout.c", tmp_path / "layout"
    src.write_text("\n".join(lines) + "\n")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                    str(exe)], check=True)
    out = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        struct, field, value = line.split()
        out.setdefault(struct, {})[field] = int(value)
    return out


def test_struct_layouts_match_the_header(tmp_path):
    layout = c_layout(tmp_path)
    assert set(layout) == set(_lib.STRUCTS)
    for cname, cls in _lib.STRUCTS.items():
        want = layout[cname]
        assert ctypes.sizeof(cls) == want.pop("."), cname
        got = {field: getattr(cls, field).offset for field, _ in cls._fields_}
        assert got == want, cname
