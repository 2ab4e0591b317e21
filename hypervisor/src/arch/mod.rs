//! Hardware layers. armhv runs on one architecture; the portable core never names it.
pub mod aarch64;
