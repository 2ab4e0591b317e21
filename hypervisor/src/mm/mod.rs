//! Memory management: the hypervisor heap and the physical frame pool that guest RAM and
//! Stage-2 tables come from.
pub mod frames;
pub mod heap;
