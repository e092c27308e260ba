//! Tokenizer and vocabulary behaviour.

use caprl_data::{tokenize, DataError, Vocab};

fn toks(s: &str) -> Vec<String> {
    tokenize(s)
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[test]
fn tokenizer_lowercases_and_drops_ptb_punctuation() {
    assert_eq!(
        toks("A man riding a wave on top of a surfboard."),
        words("a man riding a wave on top of a surfboard")
    );
    // Java: `two dogs ; one -lrb- brown -rrb- -- one `` white '' ... ok ?!`; pycocoevalcap
    // keeps the lowercased brackets and `?!` (its list has `-LRB-`, `?` and `!`).
    assert_eq!(
        toks("Two dogs; one (brown) -- one \"white\"... OK?!"),
        words("two dogs one -lrb- brown -rrb- one white ok ?!")
    );
    assert_eq!(
        toks("  A  black-and-white  cat :  "),
        words("a black-and-white cat")
    );
    assert_eq!(
        toks("It costs $5, or 10% off at 3:30, 1,000 times."),
        words("it costs $ 5 or 10 % off at 3:30 1,000 times")
    );
    assert_eq!(toks("Pi is 3.14."), words("pi is 3.14"));
}

#[test]
fn tokenizer_splits_common_contractions_like_ptb() {
    assert_eq!(toks("Don't"), words("do n't"));
    assert_eq!(
        toks("I can't, won't, cannot"),
        words("i ca n't wo n't can not")
    );
    assert_eq!(toks("It's the dog's bone"), words("it 's the dog 's bone"));
    assert_eq!(
        toks("We're here, they've gone, you'll see, he'd go, I'm in"),
        words("we 're here they 've gone you 'll see he 'd go i 'm in")
    );
    assert_eq!(toks("the dogs' toys"), words("the dogs toys"));
    assert_eq!(toks("Don’t “quote” me"), words("do n't quote me"));
}

/// The raw → tokens pairs that pycocoevalcap's Java PTBTokenizer (then its punctuation
/// filter) made for `scripts/score/make_fixtures.py`.
fn ptb_examples() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../score/tests/fixtures/coco_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture present");
    let json: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    json["ptb_examples"]
        .as_array()
        .expect("ptb_examples")
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().expect("raw and ptb strings").to_string();
            (field("raw"), field("ptb"))
        })
        .collect()
}

#[test]
fn tokenizer_equals_pycocoevalcap_ptb_on_every_fixture_example() {
    let examples = ptb_examples();
    // The examples cover what the Java tokenizer changes, so scores from raw captions are
    // pycocoevalcap's and not only scores from pre-tokenised text.
    assert!(examples.len() >= 500, "{} examples", examples.len());
    for token in [
        "-lrb-",
        "-rsb-",
        "-lcb-",
        "'s",
        "n't",
        "?!",
        "$",
        "u.s.",
        "5-year-old",
    ] {
        assert!(
            examples
                .iter()
                .any(|(_, ptb)| words(ptb).iter().any(|w| w == token)),
            "no example where PTB gives {token:?}"
        );
    }
    assert!(
        examples.iter().any(|(raw, _)| raw.contains('"')),
        "no example with quotes"
    );
    let wrong: Vec<String> = examples
        .iter()
        .filter(|(raw, ptb)| toks(raw) != words(ptb))
        .map(|(raw, ptb)| format!("{raw:?}\n   PTB:  {ptb}\n   caprl: {}", toks(raw).join(" ")))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} examples differ from pycocoevalcap:\n{}",
        wrong.len(),
        examples.len(),
        wrong.join("\n")
    );
}

#[test]
fn vocab_orders_specials_then_count_then_word() {
    let caps = [words("a red cube"), words("a blue cube"), words("a cube")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    assert_eq!(v.words()[..4], ["<pad>", "<bos>", "<eos>", "<unk>"]);
    assert_eq!(v.words()[4..], ["a", "cube", "blue", "red"]);
    assert_eq!(v.id("cube"), 5);
    assert_eq!(v.id("green"), Vocab::UNK);
    assert_eq!(v.word(5), "cube");
    assert_eq!(v.len(), 8);
}

#[test]
fn vocab_min_count_maps_rare_words_to_unk() {
    let caps = [words("a red cube"), words("a blue cube")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 2);
    assert_eq!(v.words()[4..], ["a", "cube"]);
    assert_eq!(v.encode(&words("a red cube")), vec![4, Vocab::UNK, 5]);
}

#[test]
fn vocab_decode_stops_at_eos_and_skips_pad_and_bos() {
    let caps = [words("a red cube")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    let ids = [
        Vocab::BOS,
        v.id("a"),
        Vocab::PAD,
        v.id("cube"),
        Vocab::EOS,
        v.id("red"),
    ];
    assert_eq!(v.decode(&ids), words("a cube"));
}

#[test]
fn vocab_round_trips_through_json_with_a_stable_hash() {
    let caps = [words("a red cube"), words("a blue ball")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    // Changing the hash definition breaks every snapshot's vocab check: keep it fixed.
    assert_eq!(v.hash(), "fdf180c30bf5ab2a");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.json");
    v.save(&path).unwrap();
    let back = Vocab::load(&path).unwrap();
    assert_eq!(back, v);
    assert_eq!(back.hash(), v.hash());
    let again = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    assert_eq!(again.hash(), v.hash());
}

#[test]
fn edited_vocab_file_is_rejected_with_the_path() {
    let caps = [words("a red cube")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.json");
    v.save(&path).unwrap();
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"red\"", "\"green\"");
    std::fs::write(&path, text).unwrap();
    let err = Vocab::load(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, DataError::Invalid { .. }), "{msg}");
    assert!(
        msg.contains("vocab.json") && msg.contains("edited"),
        "{msg}"
    );
}

#[test]
fn vocab_hash_check_names_both_hashes() {
    let caps = [words("a red cube")];
    let v = Vocab::build(caps.iter().map(Vec::as_slice), 1);
    let err = v
        .check_hash("0000000000000000", std::path::Path::new("d/vocab.json"))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("0000000000000000") && msg.contains(v.hash()) && msg.contains("d/vocab.json"),
        "{msg}"
    );
}
