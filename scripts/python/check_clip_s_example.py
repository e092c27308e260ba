"""Checks examples/rewards/clip_s.py by hand, without a download: builds a tiny random-weight
CLIP from transformers' own config classes (its projection as wide as the generated data set's
``fc`` features, a word-level tokenizer over the data set's words), scores a batch directly, then
trains with ``reward.spec = "cider=1,py:clip_s=0.5"``. Not run by CI (torch is several GB):

    python3 -m venv .venv-clip && .venv-clip/bin/pip install torch transformers numpy
    cargo build --release
    .venv-clip/bin/python scripts/python/check_clip_s_example.py
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CAPRL = os.path.join(ROOT, "target", "release", "caprl")


def tiny_clip(out, words, dim):
    # A BPE vocabulary whose merges are empty: every word is split into characters.
    chars = sorted({c for w in words for c in w} | set("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["<|startoftext|>", "<|endoftext|>"] + chars + [c + "</w>" for c in chars]
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f)
    with open(os.path.join(out, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    CLIPTokenizer(os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt"),
                  model_max_length=128).save_pretrained(out)
    config = CLIPConfig(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64,
                     "num_hidden_layers": 1, "num_attention_heads": 2,
                     "max_position_embeddings": 128, "bos_token_id": 0, "eos_token_id": 1,
                     "pad_token_id": 1},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 16},
        projection_dim=dim,
    )
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(out)


def main():
    tmp = tempfile.mkdtemp()
    data = os.path.join(tmp, "data")
    subprocess.run([CAPRL, "data", "synth", "--out", data, "--train", "64", "--val", "16",
                    "--test", "16", "-q"], check=True)
    words = json.load(open(os.path.join(data, "vocab.json")))["words"]
    model_dir = os.path.join(tmp, "clip")
    os.makedirs(model_dir)
    tiny_clip(model_dir, [w for w in words if isinstance(w, str)], 256)
    os.environ["CAPRL_CLIP_DIR"] = model_dir

    sys.path.insert(0, os.path.join(ROOT, "examples", "rewards"))
    sys.path.insert(0, os.path.join(ROOT, "python", "caprl"))
    import clip_s
    import reward_server

    reward_server._FEATURES = reward_server._Features(data)
    captions = json.load(open(os.path.join(data, "captions.json")))
    images = captions["images"][:3] if isinstance(captions, dict) else captions[:3]
    refs = [[" ".join(s["tokens"]) for s in im["sentences"]] for im in images]
    batch = reward_server.Batch({
        "task": "task-0", "image_ids": [str(im.get("cocoid", im.get("imgid"))) for im in images],
        "rows": [0, 1, 2], "captions": [r[0] for r in refs], "tokens": [[], [], []],
        "finished": [True] * 3, "references": refs,
    })
    values = clip_s.clip_s(batch)
    print("direct call:", values)
    assert len(values) == 3 and np.all(np.isfinite(values)) and np.all((values >= 0) & (values <= 2.5))

    run = os.path.join(tmp, "run")
    env = dict(os.environ, CAPRL_PYTHON=sys.executable)
    subprocess.run([CAPRL, "train", "-q", "--set", f"data.dir={json.dumps(data)}",
                    "--set", f"run_dir={json.dumps(run)}", "--set", "train.xe_epochs=1",
                    "--set", "train.rl_epochs=1", "--set", "train.batch_size=16",
                    "--set", "runtime.images_per_task=4", "--set", "model.hidden=32",
                    "--set", "model.embed=32", "--set", "train.eval_images=8",
                    "--set", f"reward.python={json.dumps(os.path.join(ROOT, 'examples/rewards/clip_s.py'))}",
                    "--set", 'reward.spec="cider=1,py:clip_s=0.5"'], check=True, env=env)
    steps = [json.loads(l) for l in open(os.path.join(run, "run.jsonl"))]
    rl = [s for s in steps if s.get("type") == "step" and s.get("phase") == "rl"]
    logged = [s["rewards"]["py:clip_s"] for s in rl]
    print(f"{len(rl)} RL steps, py:clip_s per step:", logged)
    assert rl and all(0.0 <= v <= 2.5 for v in logged)
    print("ok")


if __name__ == "__main__":
    main()
