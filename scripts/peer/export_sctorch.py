"""Export a caprl data set directory into the files ruotianluo/self-critical.pytorch reads (checked
against its commit 4c48a33, submodules cider e9b736d and coco-caption ea20010), so that its fc,
att (att2in2, updown) and Transformer models train on the same images, captions and features.

    python3 scripts/peer/export_sctorch.py --data DATA_DIR --out SCTORCH/data/f30k_synth [--name synth]

Writes in --out: NAME.json + NAME_label.h5 (as scripts/prepro_labels.py, from the Karpathy `tokens`;
vocabulary from the train+restval references; rarer words -> UNK; captions cut to --max-length);
NAME_fc/<id>.npy [Dfc] and NAME_att/<id>.npz (key `feat`, [R, Datt]) for its HybridLoader;
NAME-train-idxs.p / NAME-train-words.p (as scripts/prepro_ngrams.py --split train, pickle protocol
2); NAME_captions4eval.json (as scripts/prepro_reference_json.py); dataset_NAME.json (the Karpathy
file); subsets.json when the data set has one. Needs numpy and h5py only.

Train and test from the self-critical.pytorch checkout (cloned --recursive, coco-caption set up as
its README says: java 8, get_stanford_models.sh for SPICE, get_google_word2vec_model.sh for WMD;
language_eval needs both). eval_utils.getCOCO finds the references only if the --input_json path
contains `f30k` and not `coco`, and then reads data/f30k_captions4eval.json; hence:

    cp data/f30k_synth/synth_captions4eval.json data/f30k_captions4eval.json
    D=data/f30k_synth N=synth FC=<Dfc> ATT=<Datt>            # the export prints both sizes
    C="--input_json $D/$N.json --input_label_h5 $D/${N}_label.h5 --input_fc_dir $D/${N}_fc
       --input_att_dir $D/${N}_att --fc_feat_size $FC --att_feat_size $ATT
       --cached_tokens f30k_synth/${N}-train-idxs"           # CiderD opens data/<that>.p
    # fc (caption_model newfc; `fc` is the deprecated FCModel): XE 30 epochs, SCST to 50
    python tools/train.py --cfg configs/fc.yml --id fc $C
    bash scripts/copy_model.sh fc fc_rl                      # log_fc -> log_fc_rl (= start_from)
    python tools/train.py --cfg configs/fc_rl.yml --id fc_rl $C   # self_critical_after 30
    # att2in2: a2i2_sc.yml says `s: 50` where max_epochs is meant, hence --max_epochs 50
    python tools/train.py --cfg configs/a2i2.yml --id a2i2 $C
    bash scripts/copy_model.sh a2i2 a2i2_sc
    python tools/train.py --cfg configs/a2i2_sc.yml --id a2i2_sc --max_epochs 50 $C
    # updown (= topdown, fc + att): XE 30, SCST to 50
    python tools/train.py --cfg configs/updown/updown.yml --id ud $C
    bash scripts/copy_model.sh ud ud_sc
    python tools/train.py --cfg configs/updown/updown_sc.yml --id ud_sc $C
    # transformer: XE 15 (noam, 20000 warm-up steps), SCST to 50
    python tools/train.py --cfg configs/transformer/transformer.yml --id tf $C
    bash scripts/copy_model.sh tf tf_sc
    python tools/train.py --cfg configs/transformer/transformer_sc.yml --id tf_sc $C
    # test split (data paths come from the infos); scores land in eval_results/fc_rl_test.json
    python tools/eval.py --model log_fc_rl/model-best.pth --infos_path log_fc_rl/infos_fc_rl-best.pkl \
        --split test --num_images -1 --language_eval 1 --beam_size 1 --dump_images 0 --force 1

Without java, train with --language_eval 0 (best checkpoint by validation loss) and score the
test predictions elsewhere.
"""

import argparse
import json
import os
import pickle
import re
import shutil
import sys
from collections import defaultdict

import h5py
import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}  # caprl writes F32
TRAIN = ("train", "restval")


def fail(msg):
    print(f"export_sctorch: {msg}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    """{name: memory-mapped array}: the format parsed by hand (u64 LE header size, JSON header)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in DTYPES:
            fail(f"{path}: tensor {name} has dtype {t['dtype']}; only {sorted(DTYPES)} are read")
        shape, (start, end), dt = tuple(t["shape"]), t["data_offsets"], np.dtype(DTYPES[t["dtype"]])
        if end - start != int(np.prod(shape)) * dt.itemsize or 0 in shape:
            fail(f"{path}: tensor {name} of shape {shape} has {end - start} bytes")
        out[name] = np.memmap(path, dtype=dt, mode="r", offset=8 + n + start, shape=shape)
    return out


def image_id(img):
    """caprl's id: cocoid, else imgid, else the file stem (common/data/src/karpathy.rs)."""
    for key in ("cocoid", "imgid"):
        if type(img.get(key)) in (int, float, str):
            return str(img[key])
    stem = os.path.splitext(os.path.basename(img.get("filename", "")))[0]
    return stem or None


def sctorch_id(cid):
    """An int where the id is one (as prepro_labels copies cocoid/imgid), else the string."""
    return int(cid) if re.fullmatch(r"0|[1-9][0-9]*", cid) else cid


def load_images(path):
    images = json.load(open(path))["images"]
    for i, img in enumerate(images):
        cid = image_id(img)
        if not cid or "/" in cid or cid in (".", ".."):
            fail(f"{path}: images[{i}] has no usable cocoid/imgid/filename for a file name")
        if img.get("split") not in TRAIN + ("val", "test"):
            fail(f"{path}: images[{i}] has split {img.get('split')!r}")
        img["_id"] = cid
        img["_caps"] = [s["tokens"] for s in img.get("sentences", []) if s.get("tokens")]
        if not img["_caps"]:
            fail(f"{path}: image {cid} has no tokenized caption")
    return images


def build_vocab(images, count_thr):
    """prepro_labels.build_vocab over the train+restval references: words seen more than
    count_thr times in first-seen order, then 'UNK' if any caption (any split) needs it."""
    counts = {}
    for img in images:
        if img["split"] in TRAIN:
            for toks in img["_caps"]:
                for w in toks:
                    counts[w] = counts.get(w, 0) + 1
    vocab = [w for w, n in counts.items() if n > count_thr]
    kept = set(vocab)
    if any(w not in kept for img in images for toks in img["_caps"] for w in toks):
        vocab.append("UNK")  # last: CaptionModel's suppress_UNK looks for it at the last index
    return vocab


def encode(images, wtoi, max_length):
    """prepro_labels.encode_captions: 1-indexed words, 0 pad, 1-based inclusive pointers."""
    rows, lengths, start, end = [], [], *np.zeros((2, len(images)), "uint32")
    for i, img in enumerate(images):
        start[i] = len(rows) + 1
        for toks in img["_caps"]:
            row = np.zeros(max_length, "uint32")
            ids = [wtoi.get(w, wtoi.get("UNK")) for w in toks[:max_length]]
            row[: len(ids)] = ids
            rows.append(row)
            lengths.append(len(ids))
        end[i] = len(rows)
    return np.stack(rows), start, end, np.array(lengths, "uint32")


def doc_freq(refs):
    """CiderScorer(df_mode='corpus').compute_doc_freq over per-image reference strings."""
    df = defaultdict(float)
    for image_refs in refs:
        grams = set()
        for s in image_refs:
            w = s.split()
            for k in range(1, 5):
                grams.update(tuple(w[i : i + k]) for i in range(len(w) - k + 1))
        for g in grams:
            df[g] += 1
    return df


def write_ngrams(images, itow, prefix):
    """prepro_ngrams.py --split train: refs are tokens + '<eos>' (index 0), unknown -> UNK."""
    wtoi = {w: i for i, w in itow.items()}
    wtoi["<eos>"] = "0"
    words, idxs = [], []
    for img in images:
        if img["split"] in TRAIN:
            toks = [[w if w in wtoi else "UNK" for w in t + ["<eos>"]] for t in img["_caps"]]
            words.append([" ".join(t) for t in toks])
            idxs.append([" ".join(wtoi[w] for w in t) for t in toks])
    for kind, refs in (("words", words), ("idxs", idxs)):
        with open(f"{prefix}-train-{kind}.p", "wb") as f:
            pickle.dump({"document_frequency": doc_freq(refs), "ref_len": len(refs)}, f, protocol=2)


def write_references(images, path):
    """prepro_reference_json.py: COCO-format references of every image not in 'train'."""
    out = {"info": {"description": "caprl export"}, "licenses": [], "type": "captions",
           "images": [], "annotations": []}
    for img in images:
        if img["split"] != "train":
            out["images"].append({"id": sctorch_id(img["_id"])})
            for toks in img["_caps"]:
                out["annotations"].append({"image_id": sctorch_id(img["_id"]),
                                           "caption": " ".join(toks), "id": len(out["annotations"])})
    json.dump(out, open(path, "w"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="caprl data set directory")
    p.add_argument("--out", required=True, help="new or empty output directory")
    p.add_argument("--name", default="synth")
    p.add_argument("--max-length", type=int, default=16, help="prepro_labels --max_length")
    p.add_argument("--count-thr", type=int, default=None,
                   help="prepro_labels --word_count_threshold: words seen <= this often in training "
                        "become UNK (default: vocab.json's min_count - 1, else 0 = keep every word)")
    a = p.parse_args()
    data, out, name = os.path.realpath(a.data), os.path.abspath(a.out), a.name
    for f in ("captions.json", "features.safetensors", "features.ids.json"):
        if not os.path.isfile(os.path.join(data, f)):
            fail(f"{data} has no {f}")
    if not re.fullmatch(r"[\w.-]+", name) or a.max_length < 1:
        fail("--name must be a plain file name and --max-length positive")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        fail(f"--out {out} exists and is not an empty directory")
    if os.path.commonpath([os.path.realpath(out), data]) == data:
        fail(f"--out {out} is inside the input data set {data}")

    images = load_images(os.path.join(data, "captions.json"))
    vocab_json = os.path.join(data, "vocab.json")
    caprl = json.load(open(vocab_json)) if os.path.isfile(vocab_json) else None
    thr = a.count_thr if a.count_thr is not None else max(caprl["min_count"] - 1, 0) if caprl else 0
    vocab = build_vocab(images, thr)
    if caprl is not None:
        mine, theirs = set(vocab) - {"UNK"}, set(caprl["words"][4:])  # after <pad> <bos> <eos> <unk>
        if mine != theirs:
            print(f"note: vocabulary differs from vocab.json: {len(mine - theirs)} words only here, "
                  f"{len(theirs - mine)} only there (caprl re-tokenizes `raw`)", file=sys.stderr)
    itow = {str(i + 1): w for i, w in enumerate(vocab)}
    wtoi = {w: i + 1 for i, w in enumerate(vocab)}

    st = read_safetensors(os.path.join(data, "features.safetensors"))
    ids = json.load(open(os.path.join(data, "features.ids.json")))
    fc, att = st.get("fc", np.zeros(0)), st.get("att", np.zeros((len(ids), 1, 1)))
    if fc.ndim != 2 or att.ndim != 3 or not len(ids) == fc.shape[0] == att.shape[0]:
        fail("features.safetensors needs fc [N, D] (and att [N, R, D]) with N = len(features.ids.json)")
    row_of = {str(x): r for r, x in enumerate(ids)}
    missing = [img["_id"] for img in images if img["_id"] not in row_of]
    if missing:
        fail(f"{len(missing)} images have no feature row, e.g. {missing[:3]}")

    os.makedirs(os.path.join(out, f"{name}_fc"), exist_ok=True)
    if "att" in st:
        os.makedirs(os.path.join(out, f"{name}_att"))
    labels, start, end, lengths = encode(images, wtoi, a.max_length)
    with h5py.File(os.path.join(out, f"{name}_label.h5"), "w") as h:
        for key, val in (("labels", labels), ("label_start_ix", start),
                         ("label_end_ix", end), ("label_length", lengths)):
            h.create_dataset(key, dtype="uint32", data=val)
    info = {"ix_to_word": itow, "images": [
        {"split": img["split"], "file_path": os.path.join(img.get("filepath", ""), img.get("filename", "")),
         "id": sctorch_id(img["_id"])} for img in images]}
    json.dump(info, open(os.path.join(out, f"{name}.json"), "w"))
    write_ngrams(images, itow, os.path.join(out, name))
    write_references(images, os.path.join(out, f"{name}_captions4eval.json"))
    shutil.copyfile(os.path.join(data, "captions.json"), os.path.join(out, f"dataset_{name}.json"))
    if os.path.isfile(os.path.join(data, "subsets.json")):
        shutil.copyfile(os.path.join(data, "subsets.json"), os.path.join(out, "subsets.json"))

    for i, img in enumerate(images):
        r, cid = row_of[img["_id"]], img["_id"]
        np.save(os.path.join(out, f"{name}_fc", f"{cid}.npy"), np.asarray(fc[r], np.float32))
        if "att" in st:
            np.savez_compressed(os.path.join(out, f"{name}_att", f"{cid}.npz"), feat=np.asarray(att[r], np.float32))
        if (i + 1) % 1000 == 0 or i + 1 == len(images):
            print(f"{i + 1}/{len(images)} images", file=sys.stderr)

    sizes = f"--fc_feat_size {fc.shape[1]}" + (f" --att_feat_size {att.shape[2]}" if "att" in st
                                                 else " (no att tensor: only the fc model can train)")
    print(f"wrote {out}: {len(images)} images, {len(vocab)} words, {len(labels)} captions; {sizes}",
          file=sys.stderr)
    if "coco" in out or not ("f30k" in out or "flickr30k" in out):
        print("note: language_eval finds the references only when the --input_json path contains "
              "'f30k' and not 'coco' (see the docstring)", file=sys.stderr)


if __name__ == "__main__":
    main()
