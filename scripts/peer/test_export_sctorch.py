"""Check export_sctorch.py on a tiny hand-made caprl data set (3 train, 1 val, 1 test images,
fc [5, 8], att [5, 4, 6]): the files self-critical.pytorch reads, their shapes, the label layout
(1-indexed words, 0 pad, 1-based inclusive label_start_ix/label_end_ix), the CIDEr-D df pickle and
the refusals. Run: python3 scripts/peer/test_export_sctorch.py (exits 0 with a message, skipping,
when numpy or h5py is missing)."""

import json
import os
import pickle
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP test_export_sctorch: {e} (pip install numpy h5py)")
    sys.exit(0)

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "export_sctorch.py")

CAPTIONS = {  # imgid -> (split, captions)
    0: ("train", ["a dog runs", "a dog sits on the grass"]),
    1: ("train", ["a cat sits", "one two three four five six seven eight nine ten eleven twelve "
                  "thirteen fourteen fifteen sixteen seventeen eighteen"]),
    2: ("restval", ["a red dog"]),
    3: ("val", ["a zebra runs"]),  # zebra is never seen in training -> UNK
    4: ("test", ["a cat runs", "the dog"]),
}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def make_dataset(d):
    images = [{"imgid": i, "filename": f"img_{i}.png", "split": s,
               "sentences": [{"tokens": c.split(), "raw": c} for c in caps]}
              for i, (s, caps) in CAPTIONS.items()]
    json.dump({"dataset": "tiny", "images": images}, open(os.path.join(d, "captions.json"), "w"))
    counts = {}
    for s, caps in CAPTIONS.values():
        for c in caps if s in ("train", "restval") else []:
            for w in c.split():
                counts[w] = counts.get(w, 0) + 1
    words = sorted(counts, key=lambda w: (-counts[w], w))
    json.dump({"words": ["<pad>", "<bos>", "<eos>", "<unk>"] + words,
               "counts": [0] * 4 + [counts[w] for w in words], "min_count": 1, "hash": "x"},
              open(os.path.join(d, "vocab.json"), "w"))
    rng = np.random.default_rng(0)
    fc, att = rng.standard_normal((5, 8)), rng.standard_normal((5, 4, 6))
    order = [3, 0, 4, 1, 2]  # feature rows in another order than captions.json
    write_safetensors(os.path.join(d, "features.safetensors"), {"fc": fc[order], "att": att[order]})
    json.dump([str(i) for i in order], open(os.path.join(d, "features.ids.json"), "w"))
    json.dump({"seen": ["0"], "unseen": ["4"]}, open(os.path.join(d, "subsets.json"), "w"))
    return fc.astype(np.float32), att.astype(np.float32)


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        data, out = os.path.join(tmp, "data"), os.path.join(tmp, "f30k_tiny")
        os.makedirs(data)
        fc, att = make_dataset(data)
        r = run("--data", data, "--out", out, "--name", "tiny")
        assert r.returncode == 0, r.stderr
        assert "5/5 images" in r.stderr and "--fc_feat_size 8 --att_feat_size 6" in r.stderr, r.stderr
        assert "differs" not in r.stderr, r.stderr  # same word set as vocab.json

        info = json.load(open(os.path.join(out, "tiny.json")))
        itow = info["ix_to_word"]
        assert sorted(map(int, itow)) == list(range(1, len(itow) + 1))
        assert itow[str(len(itow))] == "UNK" and "zebra" not in itow.values()
        assert [im["id"] for im in info["images"]] == [0, 1, 2, 3, 4]
        assert [im["split"] for im in info["images"]] == [s for s, _ in CAPTIONS.values()]
        assert info["images"][1]["file_path"] == "img_1.png"
        wtoi = {w: int(i) for i, w in itow.items()}

        with h5py.File(os.path.join(out, "tiny_label.h5"), "r") as h:
            labels, start, end = h["labels"][:], h["label_start_ix"][:], h["label_end_ix"][:]
            length = h["label_length"][:]
            assert all(h[k].dtype == np.uint32 for k in h.keys())
        caps = [c for _, cs in CAPTIONS.values() for c in cs]
        assert labels.shape == (len(caps), 16), labels.shape
        assert start.tolist() == [1, 3, 5, 6, 7] and end.tolist() == [2, 4, 5, 6, 8]
        for k, c in enumerate(caps):
            want = [wtoi.get(w, wtoi["UNK"]) for w in c.split()][:16]
            assert labels[k].tolist() == want + [0] * (16 - len(want)), (k, labels[k])
            assert length[k] == len(want)
        img1 = labels[start[1] - 1 : end[1]]  # DataLoader: label[start-1 : end]
        assert [itow[str(x)] for x in img1[0] if x] == ["a", "cat", "sits"]
        assert length[3] == 16 and labels[3, -1] == wtoi["sixteen"]

        for i in range(5):
            f = np.load(os.path.join(out, "tiny_fc", f"{i}.npy"))
            assert f.shape == (8,) and f.dtype == np.float32 and np.array_equal(f, fc[i])
            z = np.load(os.path.join(out, "tiny_att", f"{i}.npz"))
            assert z["feat"].shape == (4, 6) and np.array_equal(z["feat"], att[i])

        with open(os.path.join(out, "tiny-train-idxs.p"), "rb") as f:
            idxs = pickle.load(f, encoding="latin1")  # as CiderScorer loads it
        assert idxs["ref_len"] == 3  # train + restval images
        df = idxs["document_frequency"]
        a, dog, eos = str(wtoi["a"]), str(wtoi["dog"]), "0"
        assert df[(a,)] == 3 and df[(eos,)] == 3 and df[(a, dog)] == 1 and df[(dog, eos)] == 1
        assert df[(str(wtoi["runs"]), eos)] == 1 and all(len(g) <= 4 for g in df)
        words = pickle.load(open(os.path.join(out, "tiny-train-words.p"), "rb"))
        assert words["document_frequency"][("a", "dog")] == 1 and words["ref_len"] == 3

        refs = json.load(open(os.path.join(out, "tiny_captions4eval.json")))
        assert [im["id"] for im in refs["images"]] == [2, 3, 4]  # every split but 'train'
        assert {"info", "licenses", "type"} <= set(refs) and len(refs["annotations"]) == 4
        assert json.load(open(os.path.join(out, "dataset_tiny.json"))) == \
            json.load(open(os.path.join(data, "captions.json")))
        assert os.path.isfile(os.path.join(out, "subsets.json"))

        r = run("--data", data, "--out", out, "--name", "tiny")
        assert r.returncode == 2 and "not an empty directory" in r.stderr, r.stderr
        r = run("--data", data, "--out", os.path.join(data, "export"))
        assert r.returncode == 2 and "inside the input" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(data, "export"))
        r = run("--data", data, "--out", os.path.join(tmp, "thr"), "--count-thr", "1")
        assert r.returncode == 0 and "differs" in r.stderr, r.stderr  # singletons -> UNK
        thr = json.load(open(os.path.join(tmp, "thr", "synth.json")))["ix_to_word"]
        assert set(thr.values()) == {"a", "dog", "sits", "UNK"}, thr
    print("test_export_sctorch: ok")


if __name__ == "__main__":
    main()
