//! Model inputs for data set rows: the one place features leave the data set
//! and become tensors, shared by the learner and the actors.

use super::config::{CaptionerConfig, ModelKind};
use super::error::{ModelError, Result};
use super::inputs::{first_appearances, Inputs};
use candle_core::Device;
use caprl_data::Dataset;

/// Features of `rows` (feature-store rows) as one batch on `device`. Each distinct image is
/// loaded once however often it repeats in `rows` (its references, its samples): the crnn model
/// then encodes each clip once, the Transformer each image once.
pub fn inputs_for_rows(
    data: &Dataset,
    rows: &[usize],
    cfg: &CaptionerConfig,
    device: &Device,
) -> Result<Inputs> {
    let (distinct, expand) = first_appearances(rows);
    let fc = data
        .fc_rows(&distinct)
        .map_err(|e| ModelError::Input(e.to_string()))?;
    let att = match cfg.reads_att() {
        true => data
            .att_rows(&distinct)
            .map_err(|e| ModelError::Input(e.to_string()))?,
        false => None,
    };
    let images = Inputs::from_host(&fc, att.as_deref(), distinct.len(), cfg, device)?;
    if cfg.model.kind == ModelKind::Crnn {
        return images.expand_rows(&expand);
    }
    if distinct.len() == rows.len() {
        return Ok(images);
    }
    let expand: Vec<usize> = expand.iter().map(|&i| i as usize).collect();
    images.select_rows(&expand)
}
