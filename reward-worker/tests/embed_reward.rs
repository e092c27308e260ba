//! The embedding reward (paper 001): an image's own references score higher than another
//! image's, and the reward is a cosine.

use caprl_data::{synth, Dataset, SynthConfig};
use caprl_reward_worker::{EmbedReward, Rewarder};

#[test]
fn an_images_own_references_score_higher_than_other_images() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("synth");
    synth(
        &dir,
        &SynthConfig {
            seed: 4,
            train: 400,
            val: 4,
            test: 4,
            progress: false,
        },
    )
    .unwrap();
    let data = Dataset::open(&dir).unwrap();
    let items = &data.train.items;
    let embed = EmbedReward::fit(&data, items).unwrap();
    let ids = |words: &[String]| -> Vec<u32> { words.iter().map(|w| data.vocab.id(w)).collect() };
    let (mut own, mut other, mut wins) = (0.0f64, 0.0f64, 0usize);
    let n = 100;
    for i in 0..n {
        let it = &items[i];
        let other_item = &items[(i + n / 2) % items.len()];
        let a = embed.cosine(it.row as u32, &ids(&it.refs[0])).unwrap();
        let b = embed
            .cosine(it.row as u32, &ids(&other_item.refs[0]))
            .unwrap();
        assert!((-1.0..=1.0 + 1e-6).contains(&a) && (-1.0..=1.0 + 1e-6).contains(&b));
        own += a as f64;
        other += b as f64;
        wins += (a > b) as usize;
    }
    assert!(
        own > other + 0.05 * n as f64,
        "mean own {:.3} vs other {:.3}",
        own / n as f64,
        other / n as f64
    );
    assert!(wins * 10 >= n * 6, "own reference wins {wins}/{n}");
    assert_eq!(embed.cosine(u32::MAX, &[4, 5]), None);
    assert_eq!(embed.cosine(items[0].row as u32, &[]), Some(0.0));

    // Through the rewarder, as a named component of the weighted sum.
    let df = Rewarder::training_df(&data, items, true);
    let r = Rewarder::new(
        &data,
        items,
        &"cider=1,embed=0.5".parse().expect("spec"),
        df,
        None,
    )
    .unwrap();
    let v = r
        .score_caption(items[0].row as u32, &ids(&items[0].refs[0]), None)
        .unwrap();
    let embed_part = v.components.iter().find(|(n, _)| n == "embed").unwrap().1;
    let cider_part = v.components.iter().find(|(n, _)| n == "cider").unwrap().1;
    assert!((v.total - (cider_part + 0.5 * embed_part)).abs() < 1e-5);
}
