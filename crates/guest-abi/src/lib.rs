//! The machine an armhv guest sees, as numbers: the one definition that the hypervisor, the
//! device-tree builder (`vmfdt`), the config checks (`vmconfig`) and the bare-metal guests all
//! use. `docs/guest-abi.md` describes the same facts for people; a test here checks that it
//! still says what this crate says.
//!
//! - [`hypercall`]: armhv's own SMCCC function IDs (vendor-specific hypervisor service).
//! - [`map`]: the guest-physical memory map and interrupt numbers (QEMU `virt`'s).
#![no_std]

#[cfg(test)]
extern crate std;

pub mod hypercall;
pub mod map;

#[cfg(test)]
mod docs;
