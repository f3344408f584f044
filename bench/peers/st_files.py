# st_files.py — a folder's safetensors files mapped, with their headers (standard library only).
"""mapped_headers(folder) walks the shards model.safetensors.index.json names (else
model.safetensors) and yields each file's map, the offset where its data starts, and its
header's tensor entries (the __metadata__ entry left out). st_numpy.py (numpy views) and
checkpoint.py (torch views) both read checkpoints through it."""
import json
import mmap
import os


def mapped_headers(folder, access=mmap.ACCESS_READ):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
            mm = mmap.mmap(f.fileno(), 0, access=access)
        yield mm, 8 + n, {k: v for k, v in header.items() if k != "__metadata__"}
