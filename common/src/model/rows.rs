//! Model inputs for data set rows: the one place features leave the data set
//! and become tensors, shared by the learner and the actors.

use super::captioner::Inputs;
use super::config::{CaptionerConfig, ModelKind};
use super::error::{ModelError, Result};
use crate::data::Dataset;
use candle_core::Device;

/// Features of `rows` (feature-store rows) as one batch on `device`.
pub fn inputs_for_rows(
    data: &Dataset,
    rows: &[usize],
    cfg: &CaptionerConfig,
    device: &Device,
) -> Result<Inputs> {
    let fc = data
        .fc_rows(rows)
        .map_err(|e| ModelError::Input(e.to_string()))?;
    let att = match cfg.kind {
        ModelKind::Att | ModelKind::Crnn => data
            .att_rows(rows)
            .map_err(|e| ModelError::Input(e.to_string()))?,
        ModelKind::Fc => None,
    };
    Inputs::from_host(&fc, att.as_deref(), rows.len(), cfg, device)
}
