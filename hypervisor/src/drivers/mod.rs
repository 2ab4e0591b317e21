//! Drivers for the physical devices armhv itself uses.
pub mod pl011;
