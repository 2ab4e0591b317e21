//! Drivers for the physical devices armhv itself uses.
pub mod gic;
pub mod machine_disk;
pub mod pl011;
pub mod uplink;
pub mod virtio_hal;
