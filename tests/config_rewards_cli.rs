//! `caprl config rewards` lists every reward of the table, and `py:<function>`.

mod support;

use caprl_reward_worker::rewards::BUILTIN;
use support::caprl;

#[test]
fn config_rewards_lists_the_table() {
    let out = caprl().args(["config", "rewards"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut want: Vec<&str> = BUILTIN.iter().map(|d| d.name).collect();
    want.push("py:<function>");
    assert_eq!(names, want, "{text}");
    assert!(
        text.contains("[reads clip.reward and the learner's discriminator]"),
        "{text}"
    );
}
