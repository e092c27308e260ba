//! A seed gives the same initial weights on every machine and across refactors of the code
//! that draws them: the sha256 of each model's freshly drawn weights (as sorted safetensors) is
//! pinned here. The draws are scalar f64 arithmetic on the seeded RNG, so no CPU level changes
//! them; a change of any hash means runs with the same seed no longer start where they did.

use caprl_clip::{Discriminator, DualConfig, DualEncoder};
use caprl_common::bus::sha256_hex;
use caprl_model::model::{params, Captioner, CaptionerConfig, Device, ModelKind, ValueHead};

fn small(kind: ModelKind, att: Option<(usize, usize)>) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(kind, 11, 8, att);
    cfg.model.embed = 6;
    cfg.model.hidden = 10;
    cfg.model.att_hidden = 5;
    cfg.model.crnn_width = 4;
    cfg.model.d_model = 8;
    cfg.model.heads = 2;
    cfg.model.d_ff = 12;
    cfg.model.enc_layers = 1;
    cfg.model.dec_layers = 1;
    cfg
}

fn captioner_hash(cfg: &CaptionerConfig) -> String {
    let model = Captioner::new(cfg, &Device::Cpu, 7).unwrap();
    sha256_hex(&model.to_safetensors().unwrap())
}

#[test]
fn every_model_draws_the_weights_it_always_drew_from_a_seed() {
    let hashes = [
        ("fc", captioner_hash(&small(ModelKind::Fc, None))),
        ("att", captioner_hash(&small(ModelKind::Att, Some((3, 8))))),
        (
            "crnn",
            captioner_hash(&small(ModelKind::Crnn, Some((8, 64)))),
        ),
        (
            "transformer",
            captioner_hash(&small(ModelKind::Transformer, Some((3, 8)))),
        ),
        (
            "value head",
            sha256_hex(
                &ValueHead::new(10, &Device::Cpu, 7)
                    .unwrap()
                    .to_safetensors()
                    .unwrap(),
            ),
        ),
        (
            "discriminator",
            sha256_hex(
                &Discriminator::new(6, &Device::Cpu, 7)
                    .unwrap()
                    .to_safetensors()
                    .unwrap(),
            ),
        ),
        ("dual encoder", {
            let cfg = DualConfig {
                vocab: 11,
                fc_dim: 8,
                embed: 6,
                hidden: 10,
                dim: 4,
            };
            // Its file's metadata map is written in no fixed order: the tensors alone are pinned.
            let dual = DualEncoder::new(cfg, "vocab", &Device::Cpu, 7).unwrap();
            let named = params::named_tensors(dual.varmap()).unwrap();
            sha256_hex(&params::to_sorted_safetensors(named, None).unwrap())
        }),
    ];
    for (name, hash) in &hashes {
        println!("{name}: {hash}");
    }
    let pinned: [(&str, &str); 7] = PINNED;
    for ((name, hash), (pinned_name, pinned_hash)) in hashes.iter().zip(pinned) {
        assert_eq!(*name, pinned_name);
        assert_eq!(
            hash, pinned_hash,
            "{name}: the weights a seed draws changed"
        );
    }
}

const PINNED: [(&str, &str); 7] = [
    (
        "fc",
        "a51dbc7729ef1df5c19e1d91352dcb36e05391de02d39187800176c386e9e3c8",
    ),
    (
        "att",
        "5023f2c9d6459f7f74ea9c9d71c6cbba835b1ecb0baeedb0ab7495270c065dde",
    ),
    (
        "crnn",
        "f157dcbffd145459e9da6144884e2f4dc20e2ed1d8889ce895794da987e40069",
    ),
    (
        "transformer",
        "115947dd0f05d49390e44d0e580fd82c5d70c915c02397cd6baa86b531b4a558",
    ),
    (
        "value head",
        "681509bd146ad5ca3361e0e0bd0b149232dce89cacd77387e65adb104d5e8ce5",
    ),
    (
        "discriminator",
        "1d9ddef49ec34a40ec681154ff38ea8fd717f9684eea28376636ad0d5d289dd0",
    ),
    (
        "dual encoder",
        "b40cf2b32a043113620cd8345e8e1e181e175b27a7e9068c7f4e443b8c8797c9",
    ),
];
