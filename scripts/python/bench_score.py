#!/usr/bin/env python3
"""caprl.score against the Python scorers it replaces, in one Python process.

1. Evaluation: 5,000 images x 5 references (the set scripts/score/bench.py scores):
   pycocoevalcap's Cider, Bleu(4) and Rouge vs caprl.score's, all cores and one thread.
2. The SCST reward: self-critical.pytorch's CiderD (ruotianluo/cider) with the corpus df at
   12 and 60 images x 5 samples, then with a training
   document-frequency pickle over --train-images images x 5 references, on batches of
   12 and 60 images x 5 samples shaped as get_self_critical_reward builds them, vs
   caprl.score.CiderD on the same pickle.

Each figure is the best of several runs after a warm-up; loading the df table is timed
once, apart.

Usage (the installed wheel, pycocoevalcap and six in the environment):
  python scripts/python/bench_score.py --ciderd PATH/TO/cider/pyciderevalcap/ciderD/ciderD_scorer.py
With --json FILE the figures are also written there, as scripts/results/python_score.sh keeps
them for the results page docs/results/python-score.md.
"""
import argparse
import json
import os
import pickle
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "score"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
from bench import make_set, timed  # noqa: E402  the set and timer of scripts/score/bench.py
from prepro_ngrams import ngram_df  # noqa: E402  the df table python/tests builds as prepro_ngrams.py

from pycocoevalcap.bleu.bleu import Bleu as RefBleu  # noqa: E402
from pycocoevalcap.cider.cider import Cider as RefCider  # noqa: E402
from pycocoevalcap.rouge.rouge import Rouge as RefRouge  # noqa: E402

import caprl.score as cs  # noqa: E402

# What --json writes: one entry per table, each with its rows in milliseconds.
RESULTS = {"tables": []}


def table(title, reference, note=None):
    """Starts a printed table and its entry in RESULTS."""
    print(f"\n### {title}\n")
    if note:
        print(note + "\n")
    RESULTS["tables"].append({"title": title, "reference": reference, "note": note, "rows": []})
    header(reference.split()[0].split("/")[0])


def row(name, ref_s, caprl_s, caprl_1_s):
    RESULTS["tables"][-1]["rows"].append(
        {"scoring": name, "reference_ms": ref_s * 1e3, "caprl_ms": caprl_s * 1e3,
         "caprl_one_thread_ms": caprl_1_s * 1e3})
    print(f"| {name:<34} | {ref_s * 1e3:>11.2f} | {caprl_s * 1e3:>9.2f} | {caprl_1_s * 1e3:>9.2f} "
          f"| {ref_s / caprl_s:>7.0f}x | {ref_s / caprl_1_s:>7.0f}x |")


def header(ref_name):
    print(f"| {'scoring':<34} | {ref_name + ' ms':>11} | {'caprl ms':>9} | {'1 thread':>9} "
          f"| {'speed-up':>8} | {'1 thread':>8} |")
    print(f"|{'-' * 36}|{'-' * 13}:|{'-' * 10}:|{'-' * 10}:|{'-' * 9}:|{'-' * 9}:|")


def evaluation(images, reps):
    refs, cands = make_set(images)
    gts, res = refs, {k: [v] for k, v in cands.items()}
    table(f"Evaluation: {images:,} images x 5 references", "pycocoevalcap 1.2")
    for name, ref, ours, ours_1 in [
        ("Cider (CIDEr-D)", RefCider(), cs.Cider(), cs.Cider(parallel=False)),
        ("Bleu(4)", RefBleu(4), cs.Bleu(4), cs.Bleu(4, parallel=False)),
        ("Rouge (ROUGE-L)", RefRouge(), cs.Rouge(), cs.Rouge(parallel=False)),
    ]:
        kwargs = {"verbose": 0} if isinstance(ref, RefBleu) else {}
        t_ref = timed(lambda: ref.compute_score(gts, res, **kwargs), max(1, reps // 3))
        t_ours = timed(lambda: ours.compute_score(gts, res), reps)
        t_one = timed(lambda: ours_1.compute_score(gts, res), reps)
        row(name, t_ref, t_ours, t_one)


def ref_ciderd(ciderd_path):
    """ruotianluo/cider's CiderD class, from its ciderD_scorer.py path."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(ciderd_path))))
    sys.path.insert(0, root)
    from pyciderevalcap.ciderD.ciderD import CiderD as RefCiderD
    return RefCiderD


def scst_corpus(ciderd_path, reps):
    """CiderD(df="corpus") at the shape get_self_critical_reward calls it: one gts entry per
    caption (the image's 5 references), random 5-12-word captions over 300 words."""
    RefCiderD = ref_ciderd(ciderd_path)
    ref = RefCiderD(df="corpus")
    # ruotianluo's copy_empty reads these, which its corpus mode never sets.
    ref.cider_scorer.document_frequency, ref.cider_scorer.ref_len = None, None
    ours, ours_1 = cs.CiderD(df="corpus"), cs.CiderD(df="corpus", parallel=False)
    table("SCST reward: CIDEr-D with the corpus df, one gts entry per caption (5 samples per image)",
          "ruotianluo/cider")
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(300)]
    sent = lambda: " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 12)))  # noqa: E731
    for images in (12, 60):
        refs = [[sent() for _ in range(5)] for _ in range(images)]
        n = images * 5
        gts = {i: refs[i // 5] for i in range(n)}
        res = [{"image_id": i, "caption": [sent()]} for i in range(n)]
        t_ref = timed(lambda: ref.compute_score(gts, res), reps)
        t_ours = timed(lambda: ours.compute_score(gts, res), reps * 10)
        t_one = timed(lambda: ours_1.compute_score(gts, res), reps * 10)
        row(f"CiderD corpus df, {n} captions", t_ref, t_ours, t_one)


def scst(ciderd_path, train_images, reps, work):
    RefCiderD = ref_ciderd(ciderd_path)

    # The table is a pure function of --train-images: kept under --work for the next run.
    name = f"bench-train-{train_images}"
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    pickle_path = os.path.join(work, "data", name + ".p")
    if not os.path.exists(pickle_path):
        train, _ = make_set(train_images, seed=23)
        counts = ngram_df(list(train.values()))
        with open(pickle_path + ".tmp", "wb") as f:
            pickle.dump(counts, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(pickle_path + ".tmp", pickle_path)
        del counts, train
    os.chdir(work)
    t = time.perf_counter()
    ref = RefCiderD(df=name)
    t_ref_load = time.perf_counter() - t
    t = time.perf_counter()
    with open(os.path.join("data", name + ".p"), "rb") as f:
        pickle.load(f, encoding="latin1")
    t_pickle = time.perf_counter() - t
    t = time.perf_counter()
    df_table = cs.load_df(name)
    t_ours_load = time.perf_counter() - t
    ours, ours_1 = cs.CiderD(df=df_table), cs.CiderD(df=df_table, parallel=False)
    table(f"SCST reward: CIDEr-D with a training df over {train_images:,} images x 5 references "
          f"({len(ref.cider_scorer.document_frequency):,} n-grams)", "ruotianluo/cider",
          f"Loading the df, once per run: ruotianluo {t_ref_load:.1f} s, caprl {t_ours_load:.1f} s "
          f"(`pickle.load` alone: {t_pickle:.1f} s).")
    rng = random.Random(5)
    val, samples = make_set(200, seed=31)
    ids = list(val)
    for batch in (12, 60):  # 60 and 300 captions, as the corpus-df table
        seq_per_img = 5
        chosen = rng.sample(ids, batch)
        # get_self_critical_reward: gts_ keyed by sample index, res_ a list of dicts.
        gts = {i: val[chosen[i // seq_per_img]] for i in range(batch * seq_per_img)}
        pool = list(samples.values())
        res = [{"image_id": i, "caption": [rng.choice(pool) + " 0"]} for i in range(batch * seq_per_img)]
        t_ref = timed(lambda: ref.compute_score(gts, res), reps)
        t_ours = timed(lambda: ours.compute_score(gts, res), reps * 10)
        t_one = timed(lambda: ours_1.compute_score(gts, res), reps * 10)
        row(f"CiderD, {batch} images x {seq_per_img} samples", t_ref, t_ours, t_one)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=5000, help="evaluation set size")
    ap.add_argument("--train-images", type=int, default=113287,
                    help="images behind the SCST df table (Karpathy's COCO train split: 113287)")
    ap.add_argument("--ciderd", help="ruotianluo/cider's ciderD_scorer.py (skip the SCST part without it)")
    ap.add_argument("--reps", type=int, default=7, help="runs of each figure, the best counts")
    ap.add_argument("--no-train-df", action="store_true",
                    help="skip the training-df SCST table (building its pickle takes minutes)")
    ap.add_argument("--work", default="target/python-bench",
                    help="where the training df pickle is kept between runs")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.json:  # the SCST table changes the working directory
        args.json = os.path.abspath(args.json)
    RESULTS.update(caprl=cs._native.__version__, python=sys.version.split()[0], reps=args.reps)
    print(f"caprl {cs._native.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}")
    evaluation(args.images, args.reps)
    if args.ciderd:
        scst_corpus(args.ciderd, args.reps)
        if not args.no_train_df:
            scst(args.ciderd, args.train_images, args.reps, os.path.abspath(args.work))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(RESULTS, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
