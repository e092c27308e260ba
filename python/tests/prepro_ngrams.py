"""self-critical.pytorch's scripts/prepro_ngrams.py, the part that counts: the training
document-frequency table that ruotianluo/cider's CiderD(df=...) loads. A helper of the tests
(test_score.py) and of scripts/python/bench_score.py, which puts this folder on sys.path."""

from collections import defaultdict


def ngram_df(ref_sets):
    """self-critical.pytorch's prepro_ngrams.py table (document_frequency, ref_len): for every
    n-gram (n = 1..4), the number of reference sets that contain it."""
    df = defaultdict(float)  # as prepro_ngrams.py writes it (ruotianluo indexes it freely)
    for refs in ref_sets:
        seen = set()
        for r in refs:
            w = r.split()
            for n in range(1, 5):
                seen.update(tuple(w[i:i + n]) for i in range(len(w) - n + 1))
        for g in seen:
            df[g] += 1.0
    return {"document_frequency": df, "ref_len": float(len(ref_sets))}
