"""caprl.score against the reference scorers: the committed fixtures (pycocoevalcap 1.2 and
ruotianluo/cider, per image and corpus) and pycocoevalcap itself, live, on awkward input."""

import pickle
import random

import numpy as np
import pytest

from caprl.score import Bleu, Cider, CiderD, DocFreq, PTBTokenizer, Rouge
from prepro_ngrams import ngram_df  # this folder's helper (pytest puts it on sys.path)

TOL = 1e-6


def by_image(images):
    gts = {im["id"]: list(im["refs"]) for im in images}
    res = {im["id"]: [im["cand"]] for im in images}
    return gts, res


def test_cider_bleu_rouge_equal_pycocoevalcap_on_the_fixture(coco):
    gts, res = by_image(coco["images"])
    score, scores = Cider().compute_score(gts, res)
    assert isinstance(scores, np.ndarray) and scores.shape == (len(gts),)
    assert abs(score - coco["corpus"]["cider_d"]) < TOL
    np.testing.assert_allclose(scores, [im["cider_d"] for im in coco["images"]], atol=TOL, rtol=0)

    bleu, bleu_images = Bleu(4).compute_score(gts, res)
    np.testing.assert_allclose(bleu, coco["corpus"]["bleu"], atol=TOL, rtol=0)
    for k in range(4):
        np.testing.assert_allclose(bleu_images[k], [im["bleu"][k] for im in coco["images"]],
                                   atol=TOL, rtol=0)

    rouge, rouge_images = Rouge().compute_score(gts, res)
    assert abs(rouge - coco["corpus"]["rouge_l"]) < TOL
    np.testing.assert_allclose(rouge_images, [im["rouge_l"] for im in coco["images"]], atol=TOL, rtol=0)


def awkward_set(seed=5, images=150):
    """Empty captions, one-word captions, repeated words, non-ASCII words, <eos> markers,
    references of different counts and integer image ids."""
    rng = random.Random(seed)
    words = ["a", "dog", "the", "on", "grass", "man", "café", "über", "<eos>", "0", "12", "red"]

    def sent(lo, hi):
        return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))

    gts, res = {}, {}
    for i in range(images):
        gts[i] = [sent(1, 14) for _ in range(rng.randint(1, 6))]
        res[i] = ["" if i % 17 == 0 else sent(1, 3) if i % 5 == 0 else sent(4, 16)]
    return gts, res


def test_every_class_equals_live_pycocoevalcap_on_awkward_input():
    from pycocoevalcap.bleu.bleu import Bleu as RefBleu
    from pycocoevalcap.cider.cider import Cider as RefCider
    from pycocoevalcap.rouge.rouge import Rouge as RefRouge

    gts, res = awkward_set()
    ref_score, ref_scores = RefCider().compute_score(gts, res)
    score, scores = Cider().compute_score(gts, res)
    assert abs(score - ref_score) < TOL
    np.testing.assert_allclose(scores, ref_scores, atol=TOL, rtol=0)

    for n in (1, 2, 4):
        ref_b, ref_bs = RefBleu(n).compute_score(gts, res, verbose=0)
        b, bs = Bleu(n).compute_score(gts, res)
        assert len(b) == n and len(bs) == n
        np.testing.assert_allclose(b, ref_b, atol=TOL, rtol=0)
        np.testing.assert_allclose(bs, ref_bs, atol=TOL, rtol=0)

    ref_r, ref_rs = RefRouge().compute_score(gts, res)
    r, rs = Rouge().compute_score(gts, res)
    assert abs(r - ref_r) < TOL
    np.testing.assert_allclose(rs, ref_rs, atol=TOL, rtol=0)


def test_one_thread_and_all_cores_give_the_same_scores():
    gts, res = awkward_set(seed=9, images=400)
    _, a = Cider(parallel=False).compute_score(gts, res)
    _, b = Cider().compute_score(gts, res)
    np.testing.assert_array_equal(a, b)


def write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def scst_batch(images, eos=None):
    """get_self_critical_reward's shapes: gts keyed by candidate index, res a list."""
    gts = {i: list(im["refs"]) for i, im in enumerate(images)}
    res = [{"image_id": i, "caption": [im["cand"]]} for i, im in enumerate(images)]
    if eos is not None:
        gts = {i: [r + " <eos>" for r in refs] for i, refs in gts.items()}
        res = [{"image_id": r["image_id"],
                "caption": [(r["caption"][0] + " <eos>").strip() if eos[i] else r["caption"][0]]}
               for i, r in enumerate(res)]
    return gts, res


def test_ciderd_with_the_training_df_pickle_equals_self_critical(coco, tmp_path, monkeypatch):
    write_pickle(tmp_path / "train-words.p", ngram_df(coco["train_refs"]))
    (tmp_path / "data").mkdir()
    write_pickle(tmp_path / "data" / "coco-train-idxs.p", ngram_df(coco["train_refs"]))
    gts, res = scst_batch(coco["images"])
    want = [im["cider_d_train_df"] for im in coco["images"]]
    # A path, and self-critical.pytorch's own convention: a name looked up as data/<name>.p.
    monkeypatch.chdir(tmp_path)
    for df in (str(tmp_path / "train-words.p"), "coco-train-idxs"):
        score, scores = CiderD(df=df).compute_score(gts, res)
        np.testing.assert_allclose(scores, want, atol=TOL, rtol=0)
        assert abs(score - np.mean(want)) < TOL


def test_ciderd_with_eos_markers_equals_self_critical(coco, coco_eos):
    finished = [im["finished"] for im in coco_eos["images"]]
    train = [[r + " <eos>" for r in refs] for refs in coco["train_refs"]]
    gts, res = scst_batch(coco["images"], eos=finished)
    score, scores = CiderD(df=ngram_df(train)).compute_score(gts, res)
    np.testing.assert_allclose(scores, [im["cider_d_eos"] for im in coco_eos["images"]],
                               atol=TOL, rtol=0)
    assert abs(score - coco_eos["corpus"]["cider_d_eos"]) < TOL


def test_ciderd_corpus_mode_counts_each_candidates_references_as_ruotianluo_does():
    # ruotianluo's corpus mode keys by candidate: five samples of an image count its
    # references five times. That is pycocoevalcap's Cider with one key per candidate.
    from pycocoevalcap.cider.cider import Cider as RefCider

    gts, res = awkward_set(seed=3, images=40)
    samples = [{"image_id": i, "caption": [f"{res[i][0]} {extra}".strip()]}
               for i in gts for extra in ("", "a dog", "red", "on the grass", "12")]
    per_candidate_gts = {k: gts[s["image_id"]] for k, s in enumerate(samples)}
    per_candidate_res = {k: s["caption"] for k, s in enumerate(samples)}
    ref_score, ref_scores = RefCider().compute_score(per_candidate_gts, per_candidate_res)
    score, scores = CiderD(df="corpus").compute_score(gts, samples)
    np.testing.assert_allclose(scores, ref_scores, atol=TOL, rtol=0)
    assert abs(score - ref_score) < TOL


def test_ptb_tokenizer_equals_the_java_tokenizer_on_the_fixture(coco):
    examples = coco["ptb_examples"]
    captions = {i: [{"caption": e["raw"]}] for i, e in enumerate(examples)}
    out = PTBTokenizer().tokenize(captions)
    assert [out[i][0] for i in range(len(examples))] == [e["ptb"] for e in examples]


def test_docfreq_from_a_dict_and_counted_agree():
    refs = [["a dog on the grass", "a brown dog"], ["a man on a horse"]]
    table = ngram_df(refs)
    a, b = DocFreq.from_counts(table["document_frequency"], table["ref_len"]), DocFreq.count(refs)
    assert len(a) == len(b) and a.num_images == b.num_images == 2
    gts = {0: refs[0], 1: refs[1]}
    res = [{"image_id": 0, "caption": ["a dog on grass"]}, {"image_id": 1, "caption": ["a man"]}]
    np.testing.assert_array_equal(CiderD(df=a).compute_score(gts, res)[1],
                                  CiderD(df=b).compute_score(gts, res)[1])


# ---- bad input: a Python exception that names what is wrong, never a crash ----

def test_an_image_without_references_is_named():
    with pytest.raises(ValueError, match=r"image id\(s\) \['x'\] of res have no references"):
        Cider().compute_score({"a": ["a dog"]}, {"a": ["a dog"], "x": ["a cat"]})
    with pytest.raises(ValueError, match=r"res\[1\]: image_id 7 has no references in gts"):
        CiderD().compute_score({0: ["a dog"]}, [{"image_id": 0, "caption": ["a dog"]},
                                                {"image_id": 7, "caption": ["a cat"]}])
    with pytest.raises(ValueError, match=r"gts\['a'\] is empty"):
        Bleu(4).compute_score({"a": []}, {"a": ["a dog"]})


def test_a_caption_that_is_not_a_string_is_named():
    with pytest.raises(TypeError, match=r"res\['a'\]\[0\] is int 42, not a str"):
        Cider().compute_score({"a": ["a dog"]}, {"a": [42]})
    with pytest.raises(TypeError, match=r"gts\['a'\]\[1\] is NoneType"):
        Rouge().compute_score({"a": ["a dog", None]}, {"a": ["a dog"]})
    with pytest.raises(ValueError, match=r"exactly one caption"):
        CiderD().compute_score({0: ["a dog"]}, [{"image_id": 0, "caption": "a dog"}])
    with pytest.raises(TypeError, match=r"captions_for_image\[1\]\[0\]\['caption'\] is bytes"):
        PTBTokenizer().tokenize({1: [{"caption": b"a dog"}]})


def test_an_unreadable_or_wrong_df_pickle_is_named(tmp_path):
    garbage = tmp_path / "garbage.p"
    garbage.write_bytes(b"\x80\x04not a pickle at all")
    with pytest.raises(ValueError, match=r"garbage\.p: not a document-frequency pickle"):
        CiderD(df=str(garbage))
    wrong = tmp_path / "wrong.p"
    write_pickle(wrong, {"counts": {}})
    with pytest.raises(ValueError, match=r'wrong\.p: expected a dict with "document_frequency"'):
        CiderD(df=str(wrong))
    bad_key = tmp_path / "bad-key.p"
    write_pickle(bad_key, {"document_frequency": {"a dog": 1.0}, "ref_len": 3.0})
    with pytest.raises(TypeError, match=r"bad-key\.p: document_frequency key a dog is not a tuple"):
        CiderD(df=str(bad_key))
    too_long = tmp_path / "five.p"
    write_pickle(too_long, {"document_frequency": {("a", "b", "c", "d", "e"): 1.0}, "ref_len": 3.0})
    with pytest.raises(ValueError, match=r"five\.p: n-gram \"a b c d e\" has 5 words"):
        CiderD(df=str(too_long))
    too_many = tmp_path / "too-many.p"
    write_pickle(too_many, {"document_frequency": {("a",): 9.0}, "ref_len": 3.0})
    with pytest.raises(ValueError, match=r"must be a whole number from 0 to ref_len = 3"):
        CiderD(df=str(too_many))
    with pytest.raises(FileNotFoundError, match=r"no document-frequency file 'nowhere'"):
        CiderD(df="nowhere")


def test_only_the_published_cider_shape_is_offered():
    with pytest.raises(ValueError, match="n=4 and sigma=6"):
        Cider(n=3)
    with pytest.raises(ValueError, match="n=4 and sigma=6"):
        CiderD(sigma=5.0)
