//! The training document frequencies kept beside the data set: the second start reads the very
//! table the first computed, a changed data set or `<eos>` rule gets a table of its own, and a
//! damaged file is counted again and replaced, never used.

mod support;

use caprl_reward_worker::{cache_path, cached_training_df, Rewarder};
use support::dataset;

#[test]
fn the_table_is_kept_read_back_keyed_by_the_references_and_recounted_when_damaged() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("a"), 7, 40);
    let items = &data.train.items;
    let counted = Rewarder::training_df(&data, items, true);
    let path = cache_path(&data, items, true);
    assert!(!path.exists());
    assert_eq!(cached_training_df(&data, items, true), counted);
    assert!(path.exists(), "the first start keeps the table");
    // The second start reads it: a table written over it under the same name is what it gets.
    let other_rule = Rewarder::training_df(&data, items, false);
    assert_ne!(other_rule, counted);
    other_rule.save(&path).unwrap();
    assert_eq!(cached_training_df(&data, items, true), other_rule);
    counted.save(&path).unwrap();

    // Another rule, another image set, another data set: other names.
    assert_ne!(cache_path(&data, items, false), path);
    assert_ne!(cache_path(&data, &items[1..], true), path);
    let other = dataset(&tmp.path().join("b"), 8, 40);
    let other_path = cache_path(&other, &other.train.items, true);
    assert_ne!(other_path.file_name(), path.file_name());

    // A damaged table is counted again and replaced.
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(cached_training_df(&data, items, true), counted);
    assert_eq!(caprl_score::DocFreq::load(&path).unwrap(), counted);
}
