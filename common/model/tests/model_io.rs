//! Weights round-trip through safetensors; devices and configs fail with clear errors.

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, parse_device, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Device, Inputs,
    ModelError, ModelKind, RnnKind, SampleOptions,
};

fn cfg() -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Att, 10, 6, Some((3, 4)));
    cfg.model.rnn = RnnKind::Lstm;
    cfg.model.layers = 2;
    cfg.model.embed = 8;
    cfg.model.hidden = 12;
    cfg.model.att_hidden = 6;
    cfg.max_len = 6;
    cfg
}

fn inputs(cfg: &CaptionerConfig) -> Inputs {
    let fc: Vec<f32> = (0..2 * 6).map(|i| (i as f32 * 0.37).sin()).collect();
    let att: Vec<f32> = (0..2 * 3 * 4).map(|i| (i as f32 * 0.91).cos()).collect();
    Inputs::from_host(&fc, Some(&att), 2, cfg, &Device::Cpu).unwrap()
}

#[test]
fn save_then_load_gives_identical_outputs() {
    let cfg = cfg();
    let a = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    a.save(&path).unwrap();
    let b = Captioner::load(&path, &cfg, &Device::Cpu).unwrap();
    let x = inputs(&cfg);
    let seqs = batch_tokens(&[vec![4, 5, 2], vec![6, 2]], &Device::Cpu).unwrap();
    let (la, _) = a.token_logprobs(&x, &seqs, None).unwrap();
    let (lb, _) = b.token_logprobs(&x, &seqs, None).unwrap();
    assert_eq!(la.to_vec2::<f32>().unwrap(), lb.to_vec2::<f32>().unwrap());
    let o = SampleOptions {
        n_per_input: 3,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: 6,
    };
    assert_eq!(
        a.sample(&x, &o, &mut CaprlRng::new(9)).unwrap(),
        b.sample(&x, &o, &mut CaprlRng::new(9)).unwrap()
    );
    let bo = BeamOptions::plain(3, 6);
    assert_eq!(a.beam(&x, &bo).unwrap(), b.beam(&x, &bo).unwrap());
    // Bytes round-trip too (policy snapshots).
    let c = Captioner::from_safetensors(&a.to_safetensors().unwrap(), &cfg, &Device::Cpu).unwrap();
    assert_eq!(a.to_safetensors().unwrap(), c.to_safetensors().unwrap());
}

/// Weights stored narrower than the model's f32 (a bf16 or f16 snapshot) load as the values
/// candle's own conversion gives, and f32 ones bit for bit.
#[test]
fn narrow_stored_weights_load_as_their_f32_conversion() {
    use caprl_model::model::{params, DType};
    let cfg = cfg();
    let a = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    for stored in [DType::F32, DType::BF16, DType::F16] {
        let mut named: Vec<_> = params::named_tensors(a.varmap())
            .unwrap()
            .into_iter()
            .map(|(k, t)| (k, t.to_dtype(stored).unwrap()))
            .collect();
        named.sort_by(|x, y| x.0.cmp(&y.0));
        let bytes = params::to_sorted_safetensors(named.clone(), None).unwrap();
        let b = Captioner::from_safetensors(&bytes, &cfg, &Device::Cpu).unwrap();
        let mut loaded = params::named_tensors(b.varmap()).unwrap();
        loaded.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(loaded.len(), named.len());
        for ((name, want), (got_name, got)) in named.iter().zip(&loaded) {
            assert_eq!(name, got_name);
            assert_eq!(got.dtype(), DType::F32, "{name} from {stored:?}");
            let want = want.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
            let got = got.flatten_all().unwrap();
            let (want, got) = (
                want.to_vec1::<f32>().unwrap(),
                got.to_vec1::<f32>().unwrap(),
            );
            let same_bits = want
                .iter()
                .zip(&got)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same_bits, "{name} stored as {stored:?}");
        }
    }
}

#[test]
fn same_seed_gives_same_initial_weights() {
    let cfg = cfg();
    let a = Captioner::new(&cfg, &Device::Cpu, 5).unwrap();
    let b = Captioner::new(&cfg, &Device::Cpu, 5).unwrap();
    let c = Captioner::new(&cfg, &Device::Cpu, 6).unwrap();
    assert_eq!(a.to_safetensors().unwrap(), b.to_safetensors().unwrap());
    assert_ne!(a.to_safetensors().unwrap(), c.to_safetensors().unwrap());
}

#[test]
fn loading_weights_of_another_shape_names_the_parameter() {
    let cfg = cfg();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    Captioner::new(&cfg, &Device::Cpu, 1)
        .unwrap()
        .save(&path)
        .unwrap();
    let mut other = cfg.clone();
    other.model.hidden = 16;
    let err = Captioner::load(&path, &other, &Device::Cpu).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::Weights { .. }), "{msg}");
    assert!(
        msg.contains("model.safetensors") && msg.contains("shape"),
        "{msg}"
    );
    let mut fc = cfg.clone();
    fc.model.kind = ModelKind::Fc;
    fc.model.layers = 1;
    // A 2-layer att file has more tensors than a 1-layer fc model needs: still loads what it needs.
    assert!(Captioner::load(&path, &fc, &Device::Cpu).is_ok());
    let missing = dir.path().join("nope.safetensors");
    let msg = Captioner::load(&missing, &cfg, &Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("nope.safetensors"), "{msg}");
}

#[test]
fn device_strings_parse_or_explain() {
    assert!(matches!(parse_device("cpu").unwrap(), Device::Cpu));
    let msg = parse_device("gpu").err().unwrap().to_string();
    assert!(msg.contains("cpu") && msg.contains("cuda:N"), "{msg}");
    let msg = parse_device("cuda:x").err().unwrap().to_string();
    assert!(msg.contains("cuda:0"), "{msg}");
    // No sign, no blank index (the config's `device` key has the same grammar:
    // common/tests/config_load.rs).
    for bad in ["cuda:+1", "cuda:", "cuda:-1"] {
        assert!(parse_device(bad).is_err(), "{bad} was accepted");
    }
    #[cfg(not(feature = "cuda"))]
    {
        let msg = parse_device("cuda:0").err().unwrap().to_string();
        assert!(msg.contains("--features cuda"), "{msg}");
    }
}

#[test]
fn invalid_configs_and_inputs_are_errors() {
    let mut c = cfg();
    c.model.layers = 3;
    let msg = Captioner::new(&c, &Device::Cpu, 0)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("model.layers"), "{msg}");
    let mut c = cfg();
    c.att = None;
    let msg = Captioner::new(&c, &Device::Cpu, 0)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("fc"), "{msg}");
    let c = cfg();
    assert!(Inputs::from_host(&[0.0; 5], None, 1, &c, &Device::Cpu).is_err());
    let m = Captioner::new(&c, &Device::Cpu, 0).unwrap();
    let x = inputs(&c);
    let bad = batch_tokens(&[vec![40, 2], vec![2]], &Device::Cpu).unwrap();
    assert!(m.token_logprobs(&x, &bad, None).is_err());
    let o = SampleOptions {
        n_per_input: 1,
        sampling: Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
        },
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: 6,
    };
    assert!(m.sample(&x, &o, &mut CaprlRng::new(0)).is_err());
}
