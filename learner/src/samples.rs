//! Sample captions: the greedy and beam captions of a fixed set of validation
//! images, recorded at every evaluation so that a reader of the report sees
//! "a red cube" become "a large red cube beside a blue sphere" — a captioner is
//! judged by reading its captions as much as by its CIDEr-D.

use caprl_common::telemetry::SampleCaption;
use caprl_data::{Dataset, Item};
use caprl_model::model::{inputs_for_rows, BeamOptions, Captioner, EOS};

use crate::error::LearnerError;

/// Greedy and top-beam captions of `items` (the beam search `beam` describes, whose bad endings
/// the greedy caption avoids too), with their references.
pub fn sample_captions(
    model: &Captioner,
    data: &Dataset,
    items: &[Item],
    beam: &BeamOptions,
) -> Result<Vec<SampleCaption>, LearnerError> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let cfg = model.config().clone();
    let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
    let x = inputs_for_rows(data, &rows, &cfg, model.device())?;
    let decoder = model.decoder()?;
    let greedy = decoder.greedy_avoiding(&x, beam.max_len, &beam.bad_endings)?;
    let beams = decoder.beam(&x, beam)?;
    let text = |tokens: &[u32]| -> String {
        let ids: Vec<u32> = tokens.iter().copied().take_while(|&t| t != EOS).collect();
        data.vocab.decode(&ids).join(" ")
    };
    Ok(items
        .iter()
        .zip(&greedy.tokens)
        .zip(&beams)
        .map(|((item, g), hyps)| SampleCaption {
            image: item.id.clone(),
            greedy: text(g),
            beam: hyps.first().map(|h| text(&h.tokens)).unwrap_or_default(),
            refs: item.refs.iter().map(|r| r.join(" ")).collect(),
        })
        .collect())
}
