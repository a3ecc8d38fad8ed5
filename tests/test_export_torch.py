#!/usr/bin/env python3
"""tests/test_export_torch.py — ./train import and export against the Python converter
(tools/gpt2_convert.py, which needs torch).

    python3 tests/test_export_torch.py [TRAIN]     (default $SEEDGPT_TRAIN, else ./train)

A random llm.c model file (tests/test_export.py's) goes through `gpt2_convert.py to-torch --format
hf` into a Hugging Face folder (pytorch_model.bin, config.json); its state dict, lm_head and all,
is written here as model.safetensors into a folder of its own with the same config.json. Then:
  - ./train import of that folder gives, byte for byte, the file `gpt2_convert.py to-llmc` makes of
    the pickle folder, and the original file;
  - ./train export of the imported file gives every tensor of the state dict (the tied lm_head
    aside) bit for bit, and config.json the converter's fields.
SKIP without torch.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

NAME = "hf_folder_import_export_matches_python_converter_bit_for_bit"
try:
    import numpy as np
    import torch
except Exception as e:  # noqa: BLE001
    print(f"SKIP {NAME}: cannot import torch and numpy with {sys.executable} ({e})")
    sys.exit(0)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.dont_write_bytecode = True
import test_export as tx  # noqa: E402


def main():
    train = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SEEDGPT_TRAIN") or "./train"
    tool = os.path.join(REPO, "tools", "gpt2_convert.py")
    cfg = tx.CFG
    with tempfile.TemporaryDirectory(prefix="seedgpt_export_torch_") as W:
        j = lambda *p: os.path.join(W, *p)  # noqa: E731
        tx.write_llmc(j("model.bin"), cfg, tx.random_model(cfg, 99))
        r = subprocess.run([sys.executable, tool, "to-torch", "--format", "hf", j("model.bin"), j("hfpt")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL {NAME}: gpt2_convert.py to-torch failed: {(r.stdout + r.stderr).strip()}")
            return 1
        sd = torch.load(j("hfpt", "pytorch_model.bin"), map_location="cpu")
        os.makedirs(j("hfst"))
        shutil.copy(j("hfpt", "config.json"), j("hfst", "config.json"))
        tx.write_safetensors(j("hfst", "model.safetensors"),
                             [(k, "F32", tuple(v.shape), v.contiguous().numpy().astype("<f4").tobytes())
                              for k, v in sd.items()])
        r1 = subprocess.run([train, "import", j("hfst"), j("ours.bin")], capture_output=True, text=True)
        r2 = subprocess.run([sys.executable, tool, "to-llmc", j("hfpt"), j("theirs.bin")],
                            capture_output=True, text=True)
        ok = r1.returncode == 0 and r2.returncode == 0
        ours = open(j("ours.bin"), "rb").read() if ok else b""
        same = ok and ours == open(j("theirs.bin"), "rb").read() and ours == open(j("model.bin"), "rb").read()
        r3 = subprocess.run([train, "export", j("ours.bin"), j("out")], capture_output=True, text=True)
        bad = ["(export failed)"]
        if r3.returncode == 0:
            _, got, _ = tx.read_safetensors(j("out", "model.safetensors"))
            keys = [k for k in sd if k != "lm_head.weight"]
            bad = [k for k in keys if k not in got or not np.array_equal(
                got[k].view(np.uint32), sd[k].contiguous().numpy().view(np.uint32))]
            bad += sorted(set(got) - set(keys))
            theirs = json.load(open(j("hfpt", "config.json")))
            conf = json.load(open(j("out", "config.json")))
            bad += [f"config {k}" for k in theirs if conf.get(k) != theirs[k]]
        print(f"{'ok  ' if same and not bad else 'FAIL'} {NAME}: import = to-llmc = the original "
              f"file: {same}; export's tensors and config differing from the converter's: {bad[:4]} "
              f"{(r1.stderr + r2.stderr + r3.stderr).strip()}")
        return 0 if same and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
