//! What an actor reads of the run config: the model it decodes with, in the dtype an actor
//! computes in, and the run's mode and message limit.

use std::sync::Arc;
use std::time::Duration;

use caprl_common::config::{Mode, RunConfig};
use caprl_data::Dataset;
use caprl_model::model::ModelError;
use caprl_model::model::{CaptionerConfig, DType, Device};

use crate::ActorConfig;

impl ActorConfig {
    /// The actor `id` of the run `cfg` over `data` on `device`. `dtype` is the compute dtype
    /// the actor was told to use (`--dtype`), if any: without it a CPU actor computes in f32
    /// whatever the run's `dtype` (chosen for the learner's GPU; bf16 on a CPU is several times
    /// slower than f32).
    pub fn for_run(
        cfg: &RunConfig,
        data: Arc<Dataset>,
        device: Device,
        id: String,
        dtype: Option<DType>,
    ) -> Result<ActorConfig, ModelError> {
        let max_len = cfg.data.max_len as usize;
        let mut model = CaptionerConfig::for_dataset(&cfg.model, &data, max_len, cfg.dtype)?;
        model.compute_dtype = compute_dtype(model.compute_dtype, &device, dtype);
        Ok(ActorConfig {
            id,
            model,
            data,
            device,
            max_message_bytes: cfg.nats.max_message_bytes as usize,
            sync: cfg.runtime.mode == Mode::Sync,
            delay: Duration::ZERO,
        })
    }
}

/// The dtype an actor computes in: the one it was told, else f32 on the CPU, else the run's.
fn compute_dtype(run: DType, device: &Device, told: Option<DType>) -> DType {
    match told {
        Some(d) => d,
        None if device.is_cpu() && run != DType::F32 => {
            tracing::info!(
                "this actor runs on the CPU: it computes in f32, not the run's dtype {run:?} \
                 (pass --dtype to the actor to follow the run)"
            );
            DType::F32
        }
        None => run,
    }
}
