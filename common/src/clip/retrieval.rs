//! Placeholder (being written on main).
