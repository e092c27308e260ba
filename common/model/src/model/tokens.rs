//! Vocabulary ids the decoder relies on: the vocabulary's own ([`caprl_data::Vocab`] defines
//! them), named here for the model code, in a leaf every model file may import.

/// Padding after a caption's end.
pub const PAD: u32 = caprl_data::Vocab::PAD;
/// Beginning of sentence, the decoder's first input.
pub const BOS: u32 = caprl_data::Vocab::BOS;
/// End of sentence; decoding stops after it.
pub const EOS: u32 = caprl_data::Vocab::EOS;
