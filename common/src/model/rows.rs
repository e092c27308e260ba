//! Model inputs for data set rows: the one place features leave the data set
//! and become tensors, shared by the learner and the actors.

use super::config::{CaptionerConfig, ModelKind};
use super::error::{ModelError, Result};
use super::inputs::Inputs;
use crate::data::Dataset;
use candle_core::Device;

/// Features of `rows` (feature-store rows) as one batch on `device`. For the crnn model each
/// distinct clip is loaded (and later encoded) once, however often it repeats in `rows`.
pub fn inputs_for_rows(
    data: &Dataset,
    rows: &[usize],
    cfg: &CaptionerConfig,
    device: &Device,
) -> Result<Inputs> {
    if cfg.kind == ModelKind::Crnn {
        let mut distinct = Vec::new();
        let mut seen = std::collections::HashMap::new();
        let expand: Vec<u32> = rows
            .iter()
            .map(|&r| {
                *seen.entry(r).or_insert_with(|| {
                    distinct.push(r);
                    distinct.len() as u32 - 1
                })
            })
            .collect();
        let fc = data
            .fc_rows(&distinct)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        let att = data
            .att_rows(&distinct)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        return Inputs::from_host(&fc, att.as_deref(), distinct.len(), cfg, device)?
            .expand_rows(&expand);
    }
    let fc = data
        .fc_rows(rows)
        .map_err(|e| ModelError::Input(e.to_string()))?;
    let att = match cfg.kind {
        ModelKind::Att => data
            .att_rows(rows)
            .map_err(|e| ModelError::Input(e.to_string()))?,
        ModelKind::Fc | ModelKind::Crnn => None,
    };
    Inputs::from_host(&fc, att.as_deref(), rows.len(), cfg, device)
}
