//! Placeholder (being written on main).
pub struct Discriminator;
