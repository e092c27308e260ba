//! caprl-learner: objectives, batch assembly, checkpoints and evaluation.
