#!/usr/bin/env python3
# make_fuzz_corpus.py — writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/).
"""Seeds for the libFuzzer targets of tests/fuzz/, committed in-tree (the replay tests run them).

  safetensors  the I/O corpus's .safetensors files, and one small generated checkpoint file
  index        each index.json of the I/O corpus alone, and each index folder as one framed input
  config       the config corpus and the real configs of tests/data/configs
  npy          the I/O corpus's .npy files
  open_create  small checkpoints of every family and expert format made by `moe gen`, framed
               (config.json + model.safetensors, or an index and shards), and a few broken ones

A framed input is NAME "\\n" CONTENT per file, files separated by SEP (tests/fuzz/fuzz_util.h).
Python 3 standard library only; deterministic for a given moe binary.

Usage: scripts/make_fuzz_corpus.py PATH/TO/moe [REPO_ROOT]
"""
import os
import shutil
import subprocess
import sys
import tempfile

SEP = b"\n--moe-fuzz-file--\n"
MOE = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")

# Small enough that a mutation touches something that matters; hidden and intermediate are
# multiples of 32 only where MXFP4 needs it.
TINY = ["--layers", "2", "--hidden", "16", "--experts", "4", "--topk", "2", "--intermediate", "16",
        "--vocab", "16"]
TINY32 = ["--layers", "2", "--hidden", "32", "--experts", "4", "--topk", "2", "--intermediate", "32",
          "--vocab", "16"]
MODELS = [
    ("deepseek_v2_bf16", TINY + ["--family", "deepseek_v2", "--dtype", "bf16", "--groups", "2",
                                 "--topk-group", "1", "--dense-intermediate", "16"]),
    ("deepseek_v3_fp8", TINY + ["--family", "deepseek_v3", "--dtype", "fp8", "--groups", "2",
                                "--topk-group", "1", "--dense-intermediate", "16"]),
    ("deepseek_v3_bf16_shards", TINY + ["--family", "deepseek_v3", "--dtype", "bf16", "--groups",
                                        "2", "--topk-group", "1", "--dense-intermediate", "16",
                                        "--shards", "2"]),
    ("kimi_k2_fp8", TINY + ["--family", "kimi_k2", "--dtype", "fp8", "--dense-intermediate", "16"]),
    ("deepseek_v4_fp8", TINY + ["--family", "deepseek_v4", "--dtype", "fp8"]),
    ("deepseek_v4_mxfp4", TINY32 + ["--family", "deepseek_v4", "--dtype", "mxfp4"]),
    ("qwen3_moe_bf16", TINY + ["--family", "qwen3_moe", "--dtype", "bf16"]),
    ("qwen3_moe_fp8", TINY + ["--family", "qwen3_moe", "--dtype", "fp8"]),
    ("mixtral_bf16", TINY + ["--family", "mixtral", "--dtype", "bf16", "--layers", "1"]),
    ("gpt_oss_bf16", TINY + ["--family", "gpt_oss", "--dtype", "bf16", "--layers", "1"]),
    ("gpt_oss_mxfp4", TINY32 + ["--family", "gpt_oss", "--dtype", "mxfp4", "--layers", "1"]),
    ("deepseek_v32_fp8", TINY + ["--family", "deepseek_v32", "--dtype", "fp8", "--groups", "2",
                                 "--topk-group", "1", "--dense-intermediate", "16"]),
    ("glm4_moe_bf16", TINY + ["--family", "glm4_moe", "--dtype", "bf16",
                              "--dense-intermediate", "16"]),
    ("glm_moe_dsa_fp8", TINY + ["--family", "glm_moe_dsa", "--dtype", "fp8",
                                "--dense-intermediate", "16"]),
    ("glm4_moe_lite_bf16", TINY + ["--family", "glm4_moe_lite", "--dtype", "bf16",
                                   "--dense-intermediate", "16"]),
    ("minimax_m2_fp8", TINY + ["--family", "minimax_m2", "--dtype", "fp8", "--layers", "1"]),
    ("kimi_k25_bf16", TINY + ["--family", "kimi_k25", "--dtype", "bf16",
                              "--dense-intermediate", "16"]),
    ("kimi_k2_int4", TINY32 + ["--family", "kimi_k2", "--dtype", "int4", "--first-dense", "1",
                               "--dense-intermediate", "32"]),
]


def fresh(target):
    d = os.path.join(OUT, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def frame(files):
    """files: list of (name, bytes) -> one framed input."""
    return SEP.join(name.encode() + b"\n" + data for name, data in files)


def folder_files(d):
    return [(n, read(os.path.join(d, n))) for n in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, n))]


def copy_all(src, dst, prefix=""):
    for n in sorted(os.listdir(src)):
        p = os.path.join(src, n)
        if os.path.isfile(p):
            shutil.copyfile(p, os.path.join(dst, prefix + n))


def gen(tmp, name, args):
    d = os.path.join(tmp, name)
    subprocess.run([MOE, "gen", "--out", d, "--seed", "7"] + args, check=True,
                   stdout=subprocess.DEVNULL)
    return d


def main():
    corpus = os.path.join(DATA, "corpus")
    d = fresh("safetensors")
    copy_all(os.path.join(corpus, "safetensors"), d)
    d = fresh("npy")
    copy_all(os.path.join(corpus, "npy"), d)
    d = fresh("config")
    copy_all(os.path.join(corpus, "config"), d)
    copy_all(os.path.join(DATA, "configs"), d, "real_")
    d = fresh("index")
    for case in sorted(os.listdir(os.path.join(corpus, "index"))):
        src = os.path.join(corpus, "index", case)
        idx = os.path.join(src, "model.safetensors.index.json")
        if os.path.isfile(idx):
            shutil.copyfile(idx, os.path.join(d, case + ".json"))
        write(os.path.join(d, case + ".folder"), frame(folder_files(src)))

    oc = fresh("open_create")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in MODELS:
            files = folder_files(gen(tmp, name, args))
            write(os.path.join(oc, name), frame(files))
        # A few broken folders: the model.safetensors of one family under another's config, a
        # missing tensor, a shard cut short, and one mapped-or-read flip of the last byte.
        v3 = dict(folder_files(os.path.join(tmp, "deepseek_v3_fp8")))
        qwen = dict(folder_files(os.path.join(tmp, "qwen3_moe_bf16")))
        write(os.path.join(oc, "broken_config_mismatch"),
              frame([("config.json", qwen["config.json"]),
                     ("model.safetensors", v3["model.safetensors"])]))
        write(os.path.join(oc, "broken_truncated"),
              frame([("config.json", v3["config.json"]),
                     ("model.safetensors", v3["model.safetensors"][:-5])]))
        omit = gen(tmp, "omit", TINY + ["--family", "mixtral", "--dtype", "bf16", "--layers", "1",
                                        "--omit", "model.layers.0.block_sparse_moe.experts.1.w2.weight"])
        write(os.path.join(oc, "broken_missing_tensor"), frame(folder_files(omit)))
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print("wrote %s (%d bytes)" % (os.path.relpath(OUT, ROOT), total))


main()
