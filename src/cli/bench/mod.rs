//! `caprl bench`: one subcommand per benchmark, each in the file named after it; `all` runs
//! the set and prints one table.

use anyhow::Result;

use super::Global;

mod all;
mod audio;
mod broadcast;
mod clip;
mod delta;
mod model;
mod pipeline;
mod reward;
mod rollouts;
mod scale;
mod transformer;
mod transformer_flops;
mod transport;
mod updating;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// In-process vs NATS iterations/s, snapshot broadcast latency, rollout throughput.
    Transport(transport::TransportArgs),
    /// The whole benchmark set in one table with ratios (`--json` for tracking).
    All(all::AllArgs),
    /// Captioner speed per device and dtype: XE and SCST steps, decode tokens/s, snapshots.
    Model(model::ModelArgs),
    /// The Transformer on its PyTorch peer's protocol, at the synthetic and COCO shapes.
    Transformer(transformer::TransformerBenchArgs),
    /// A policy version's delta against its full snapshot after real updates (f32 and bf16):
    /// values changed, bytes, time to make and to rebuild it.
    Delta(delta::DeltaBenchArgs),
    /// A policy version from the learner to N readers through a real nats-server at a real
    /// model's size: bytes on the wire and the time to the last reader, with deltas and caches.
    Broadcast(broadcast::BroadcastBenchArgs),
    /// Audio front-end throughput and CRNN encoder speed on 1 and 2 threads.
    Audio(audio::AudioBenchArgs),
    /// Paper 004's rewards (clip + disc) per caption vs CIDEr-D, and text-encoder throughput.
    Clip(clip::ClipBenchArgs),
    /// A reward written in Python against built-in ones, per rollout as a reward worker scores
    /// it (`--python` module, `--rewards` names).
    Reward(reward::RewardBenchArgs),
    /// Async throughput against the number of actors over a real nats-server, with the decode
    /// and the update simulated (stated costs): where the learner or NATS becomes the limit.
    Scale(scale::ScaleArgs),
    /// Where an RL step's time goes, role by role, in one process and over NATS with A actors
    /// and W reward workers (any config): stage times, start-up, peak memory per process.
    Pipeline(pipeline::PipelineArgs),
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    match args.what {
        What::Transport(a) => transport::run(a, global),
        What::All(a) => all::run(a, global),
        What::Model(a) => model::run(a),
        What::Transformer(a) => transformer::run(a),
        What::Delta(a) => delta::run(a),
        What::Broadcast(a) => broadcast::run(a),
        What::Audio(a) => audio::run(a),
        What::Clip(a) => clip::run(a),
        What::Reward(a) => reward::run(a),
        What::Scale(a) => scale::run(a, global),
        What::Pipeline(a) => pipeline::run(a, global),
    }
}
