//! Drivers for the physical devices armhv itself uses.
pub mod gic;
pub mod pl011;
