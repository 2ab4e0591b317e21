#!/usr/bin/env python3
"""Writes the committed seed corpus: fuzz/seeds/<target>/<name>, a few meaningful inputs per target.

Run from anywhere: `python3 fuzz/seeds/generate.py` (rewrites every seed; the output is
deterministic, so an unchanged script leaves `git status` clean). Each seed's layout follows the
target's doc comment in fuzz/fuzz_targets/<target>.rs; when a target's input layout changes,
change its section here and regenerate. The vmconfig target also gets configs/*.toml and
configs/bad/*.toml as seeds, by reference (xtask/tests/fuzz.rs copies them into its corpus).
"""

import os
import shutil
import struct

SEEDS = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    os.makedirs(os.path.join(SEEDS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(SEEDS, target, name), "wb") as f:
        f.write(data)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


# --- esr: ESR_EL2, FAR_EL2, HPFAR_EL2 as three little-endian u64s -----------------------------

def esr(ec, iss, il=True):
    return (ec << 26) | (int(il) << 25) | iss


def dabt_iss(sas, srt, wnr, sse=False, sf=False, ar=False, dfsc=0x07):
    return ((1 << 24) | (sas << 22) | (int(sse) << 21) | (srt << 16) | (int(sf) << 15)
            | (int(ar) << 14) | (int(wnr) << 6) | dfsc)


ESR = {
    # STR w1, [x0] to an MMIO page at 0x0900_0018 (PL011 UARTDR + 0x18): stage-2 translation fault.
    "str-w1-mmio": (esr(0x24, dabt_iss(2, 1, True)), 0xffff_0000_0900_0018, 0x0090_0000 >> 0),
    # LDRSH x3 with acquire semantics.
    "ldrsh-x3-acquire": (esr(0x24, dabt_iss(1, 3, False, sse=True, sf=True, ar=True, dfsc=0x06)),
                         0x0a00_0002, 0x0a0_0000 >> 0),
    # LDP (no valid syndrome), FAR not valid, on a stage-1 walk.
    "ldp-no-isv": (esr(0x24, (1 << 10) | (1 << 7) | 0x0f), 0, 0x40_0000),
    "hvc-0": (esr(0x16, 0), 0, 0),
    "smc-0": (esr(0x17, 0), 0, 0),
    "mrs-id-aa64pfr0": (0x6230_0069, 0, 0),
    "dc-isw": (esr(0x18, (1 << 20) | (2 << 17) | (7 << 10) | (5 << 5) | (6 << 1)), 0, 0),
    "wfi": (esr(0x01, 0), 0, 0),
    "wfet-x2": (esr(0x01, 0x47), 0, 0),
    "iabt-permission": (esr(0x20, 0x0f), 0x4008_0000, 0x4_0080),
    "serror": (esr(0x2f, 0x11), 0, 0),
    "fp-trap": (esr(0x07, 0), 0, 0),
    "brk": (esr(0x3c, 0x1234), 0, 0),
}


def esr_seeds():
    for name, (e, far, hpfar) in ESR.items():
        write("esr", name, u64(e) + u64(far) + u64(hpfar))


# --- vgic_mmio: 3 config bytes, then opcodes and arguments -------------------------------------
# Opcode byte: bit 7 = write / line high, (op & 0x7f) % 13 selects. Arguments per opcode as read
# by fuzz_targets/vgic_mmio.rs: widths 0..3 = byte, half, word, double; an offset is a selector
# byte (index into the DIST/REDIST tables, bit 7 = leave unaligned, >= 0xf0 = raw u64 follows)
# and a u16 delta; an INTID is a selector byte (not 0xff) and a u16.

W8, W16, W32, W64 = 0, 1, 2, 3
DIST = {"CTLR": 0, "IGROUPR": 1, "ISENABLER": 2, "ICENABLER": 3, "ISPENDR": 4, "ICPENDR": 5,
        "ISACTIVER": 6, "ICACTIVER": 7, "IPRIORITYR": 8, "ICFGR": 10, "IROUTER": 13, "ID": 14}
REDIST = {"RD": 0, "SGI_BITS": 1, "SGI_PRIORITY": 2, "SGI_ICFGR": 3, "ID": 5}
WRITE = 0x80


def dist_write(reg, delta, width, value):
    return bytes([0 | WRITE, width, DIST[reg]]) + u16(delta) + u64(value)


def dist_read(reg, delta, width):
    return bytes([0, width, DIST[reg]]) + u16(delta)


def redist_write(vcpu, reg, delta, width, value):
    return bytes([2 | WRITE, width, vcpu, REDIST[reg]]) + u16(delta) + u64(value)


def redist_read(vcpu, reg, delta, width):
    return bytes([2, width, vcpu, REDIST[reg]]) + u16(delta)


def intid(n):
    return bytes([0]) + u16(n)


def set_level(n, vcpu, high):
    return bytes([4 | (WRITE if high else 0)]) + intid(n) + bytes([vcpu])


def trigger_edge(n, vcpu):
    return bytes([5]) + intid(n) + bytes([vcpu])


def send_sgi(sender, value):
    return bytes([6, sender]) + u64(value)


def flush(vcpu):
    return bytes([7, vcpu])


def guest(vcpu, slot, state):  # state: 0 invalid, 1 pending, 2 active, 3 pending+active
    return bytes([8, vcpu, slot, state])


def sync(vcpu, n):
    return bytes([9, vcpu, n])


def hw_link(n, vcpu, pintid):
    return bytes([10]) + intid(n) + bytes([vcpu, 1 if pintid == n else 0])


def query(vcpu, n, who):
    return bytes([11, vcpu]) + intid(n) + bytes([who])


def linux_boot(vcpus):
    """What Linux's GICv3 driver does at boot, per vCPU, then the distributor."""
    ops = b""
    for v in range(vcpus):
        ops += redist_write(v, "RD", 0x14, W32, 0)                  # GICR_WAKER: wake up
        ops += redist_read(v, "RD", 0x14, W32)
        ops += redist_read(v, "RD", 0x08, W64)                      # GICR_TYPER
        ops += redist_write(v, "SGI_BITS", 0x0, W32, 0xffffffff)    # IGROUPR0: all Group 1
        ops += redist_write(v, "SGI_BITS", 0x100, W32, 0xffff0000)  # ICENABLER0: PPIs off
        ops += redist_write(v, "SGI_BITS", 0x80, W32, 0x0000ffff)   # ISENABLER0: SGIs on
        ops += redist_write(v, "SGI_PRIORITY", 0, W32, 0xa0a0a0a0)
    ops += dist_write("CTLR", 0, W32, 0)
    ops += dist_read("CTLR", 4, W32)                                 # GICD_TYPER
    ops += dist_read("ID", 0x18, W32)                                # GICD_PIDR2
    ops += dist_write("IGROUPR", 4, W32, 0xffffffff)
    ops += dist_write("ICFGR", 8, W32, 0)
    ops += dist_write("IPRIORITYR", 32, W32, 0xa0a0a0a0)
    ops += dist_write("IROUTER", 33 * 8, W64, 0)
    ops += dist_write("CTLR", 0, W32, 0x13)
    return ops


def vgic_seeds():
    # A device SPI (33, the PL011's) on 2 vCPUs with 4 list registers: raised, delivered,
    # acknowledged, completed.
    ops = linux_boot(2)
    ops += dist_write("ISENABLER", 4, W32, 1 << 1)
    ops += set_level(33, 0, True) + flush(0) + guest(0, 0, 2) + sync(0, 4)
    ops += set_level(33, 0, False) + guest(0, 0, 0) + sync(0, 4) + flush(0) + query(0, 33, 0)
    write("vgic_mmio", "linux-spi", bytes([2, 2, 3]) + ops)

    # IPIs: vCPU 0 sends SGI 1 to vCPU 1 (TargetList bit 1), then to all but itself.
    ops = linux_boot(2)
    ops += send_sgi(0, (1 << 24) | 0b10) + flush(1) + guest(1, 0, 2) + sync(1, 4)
    ops += guest(1, 0, 0) + sync(1, 4) + send_sgi(1, (1 << 40) | (2 << 24)) + flush(0)
    write("vgic_mmio", "sgi", bytes([2, 2, 3]) + ops)

    # The virtual timer, PPI 27, hardware-linked, level-sensitive, on 4 vCPUs.
    ops = linux_boot(4)
    for v in range(4):
        ops += redist_write(v, "SGI_BITS", 0x80, W32, 1 << 27)
        ops += hw_link(27, v, 27) + set_level(27, v, True) + flush(v) + guest(v, 0, 2) + sync(v, 4)
    write("vgic_mmio", "timer-ppi", bytes([4, 2, 3]) + ops)

    # More pending SPIs than list registers (2), edge-triggered, with priorities.
    ops = linux_boot(1)
    ops += dist_write("ICFGR", 8, W32, 0xaaaaaaaa)
    ops += dist_write("ISENABLER", 4, W32, 0xffffffff)
    for n in range(40, 46):
        ops += dist_write("IPRIORITYR", n, W8, (n * 8) & 0xff) + trigger_edge(n, 0)
    ops += flush(0) + guest(0, 1, 2) + sync(0, 2) + flush(0) + dist_write("ICPENDR", 4, W32, 0xffffffff)
    ops += flush(0)
    write("vgic_mmio", "edge-overflow", bytes([1, 2, 1]) + ops)


# --- device_tree: arbitrary::Unstructured, dictionary choices only -----------------------------
# Each call below consumes what the target's `machine()` reads: `ratio` and `choose` one byte
# (byte 0 = the usual branch / the first entry), `int_in_range` one byte for ranges below 256 and
# two (big-endian) up to 65535, `bool` one byte; `choose` from a single entry reads nothing.

NAMES = ["pl031@9010000", "rtc@1000", "chosen", "cpus", "psci", "timer", "apb-pclk",
         "memory@40000000", "pl011@9000000", "intc@8000000", "virtio_mmio@a000000", "", "a@b@c",
         "1bad", "bad/name", "x@", "this-node-name-is-longer-than-31-chars@1"]
STRINGS = ["vm0", "console=ttyAMA0 quiet", "", "hvc", "smc", "a\0b"]
RAM_STARTS = [0x4000_0000, 0x8000_0000, 0, 2**64 - 0x1000]
RAM_SIZES = [256 << 20, 32 << 20, 0, 0x1000, 2**64 - 1]


def pick(index):
    return bytes([0, index])


def pick_only():
    """The usual branch of a one-entry dictionary."""
    return bytes([0])


def machine(name=0, vcpus=2, start=0, size=0, uart=None, gic=True, timer=True, virtio=0,
            assigned=(), bootargs=1, initrd=None, psci=0):
    b = pick(name) + bytes([0, vcpus]) + pick(start) + pick(size)
    b += bytes([1]) + pick_only() + bytes([0]) + struct.pack(">H", uart) if uart is not None \
        else bytes([0])
    b += bytes([0]) + pick_only() + pick_only() if gic else bytes([3])
    b += bytes([int(timer), virtio]) + bytes([0, 0]) * virtio
    b += bytes([len(assigned)])
    for node, spis in assigned:
        b += pick(NAMES.index(node)) + bytes([0]) + pick(0) + pick(0) + bytes([len(spis)])
        for spi in spis:
            b += bytes([0]) + struct.pack(">H", spi) + pick(0)
    b += pick(bootargs)
    if initrd is None:
        b += bytes([0])
    else:
        off, length = initrd
        b += bytes([1, 0]) + u64(off) + u64(length)
    return b + pick(psci)


def device_tree_seeds():
    # make run's VMs: 2 vCPUs, 256 MiB at 0x4000_0000, PL011, GIC, timer, 2 virtio slots, initrd.
    write("device_tree", "linux", machine(uart=1, virtio=2, initrd=(0x0800_0000, 0x12_3456)))
    write("device_tree", "passthrough-rtc",
          machine(vcpus=1, size=1, uart=1, virtio=1, assigned=[("pl031@9010000", [2])]))
    write("device_tree", "eight-vcpus-8-virtio", machine(vcpus=8, virtio=8, bootargs=2))
    write("device_tree", "minimal-smc", machine(vcpus=1, gic=False, timer=False, psci=1))
    # Invalid: an assigned device named like the chosen node, and 0 vCPUs.
    write("device_tree", "shadows-chosen", machine(assigned=[("chosen", [])]))
    write("device_tree", "no-vcpus", machine(vcpus=0))


# --- vmconfig: packages (the format in crates/vmconfig/src/package.rs) -------------------------

MAGIC = b"ARMHVPKG"
VERSION = 7
HEADER, RECORD, DISK, NIC, PATH = 48, 184, 40, 16, 8
PAGE = 4096


def align(n):
    return (n + PAGE - 1) // PAGE * PAGE


def package(vms, quantum_ms=10, irqdist=0):
    """vms: dicts with name, vcpus, memory (start, size), kernel (load, bytes), entry, and
    optionally cmdline, devices (codes), affinity, initrd (load, bytes), disks
    [(capacity, image bytes, read_only[, partition name])], nics [(mac, network, mtu or 0)], passthrough [path], pmu,
    weight, cap, realtime (budget_us, period_us)."""
    records_end = HEADER + RECORD * len(vms)
    extras_len = [len(vm.get("disks", [])) * DISK + len(vm.get("nics", [])) * NIC
                  + len(vm.get("passthrough", [])) * PATH for vm in vms]
    strings_off = records_end + sum(extras_len)
    strings = bytearray()

    def string(s):
        off = strings_off + len(strings)
        strings.extend(s.encode())
        return u32(off) + u32(len(s.encode()))

    str_refs = []
    for vm in vms:
        str_refs.append({
            "name": string(vm["name"]),
            "cmdline": string(vm.get("cmdline", "")),
            "nets": [string(net) for _, net, _ in vm.get("nics", [])],
            "paths": [string(p) for p in vm.get("passthrough", [])],
            "partitions": [string(d[3]) if len(d) > 3 else bytes(8) for d in vm.get("disks", [])],
        })
    blobs_off = align(strings_off + len(strings))
    blobs = bytearray()
    placed = {}

    def blob(data):
        # Identical images share one copy, as encode_package does.
        if data in placed:
            return placed[data]
        off = placed[data] = blobs_off + len(blobs)
        blobs.extend(data)
        blobs.extend(bytes(align(len(blobs)) - len(blobs)))
        return off

    records = bytearray()
    extras = bytearray()
    extras_off = records_end
    for vm, refs, elen in zip(vms, str_refs, extras_len):
        r = bytearray(RECORD)
        r[0:8] = refs["name"]
        r[8:16] = refs["cmdline"]
        r[16] = vm["vcpus"]
        devices = vm.get("devices", [1])
        r[17] = len(devices)
        r[18] = (1 if "initrd" in vm else 0) | (2 if vm.get("pmu") else 0)
        affinity = vm.get("affinity", [])
        for slot in range(8):
            r[20 + 4 * slot:24 + 4 * slot] = u32(affinity[slot] if slot < len(affinity)
                                                 else 0xffffffff)
        for slot, code in enumerate(devices):
            r[52 + slot] = code
        r[64:72] = u64(vm["memory"][0])
        r[72:80] = u64(vm["memory"][1])
        r[80:88] = u64(vm["entry"])
        load, data = vm["kernel"]
        r[96:128] = u64(load) + u64(max(len(data), vm.get("kernel_mem", 0))) + u64(blob(data)) \
            + u64(len(data))
        if "initrd" in vm:
            load, data = vm["initrd"]
            r[128:160] = u64(load) + u64(len(data)) + u64(blob(data)) + u64(len(data))
        r[160:164] = u32(extras_off)
        r[164] = len(vm.get("disks", []))
        r[165] = len(vm.get("nics", []))
        r[166] = len(vm.get("passthrough", []))
        r[168:172] = u32(vm.get("weight", 256))
        r[172:176] = u32(vm.get("cap", 0))
        r[176:184] = b"".join(u32(x) for x in vm.get("realtime", (0, 0)))
        records += r
        for (capacity, image, read_only, *_), partition in zip(vm.get("disks", []),
                                                               refs["partitions"]):
            off = blob(image) if image else 0
            extras.extend(u64(capacity) + u64(off) + u64(len(image)) + bytes([int(read_only)])
                          + bytes(7) + partition)
        for (mac, _, mtu), net in zip(vm.get("nics", []), refs["nets"]):
            extras.extend(bytes(mac) + u16(mtu) + net)
        for path in refs["paths"]:
            extras.extend(path)
        extras_off += elen
    total = blobs_off + len(blobs)
    header = MAGIC + u32(VERSION) + u32(len(vms)) + u64(total) + u64(blobs_off) + u64(strings_off) \
        + u32(quantum_ms) + u32(irqdist)
    out = header + records + extras + strings
    return bytes(out + bytes(blobs_off - len(out)) + blobs)


RAM = (0x4000_0000, 32 << 20)
KERNEL = (0x4008_0000, bytes(range(256)) * 4)


def vmconfig_seeds():
    write("vmconfig", "package-one-vm",
          package([{"name": "vm0", "vcpus": 1, "memory": RAM, "kernel": KERNEL,
                    "entry": 0x4008_0000}]))
    mac0 = [0x52, 0x54, 0, 0x12, 0x34, 0x56]
    mac1 = [0x52, 0x54, 0, 0x12, 0x34, 0x57]
    write("vmconfig", "package-two-vms-devices", package([
        {"name": "linux0", "vcpus": 2, "affinity": [0, 1], "memory": RAM, "kernel": KERNEL,
         "entry": 0x4008_0000, "cmdline": "console=hvc0 quiet", "devices": [1, 2, 3],
         "initrd": (0x4100_0000, b"\x55" * 89), "disks": [(1024, bytes(range(200)), False),
                                                          (4096, b"", True),
                                                          (4 << 30, b"", False, "linux0-data")],
         "nics": [(mac0, "lan0", 9000)], "passthrough": ["/pl031@9010000"]},
        {"name": "linux1", "vcpus": 1, "memory": (0x8000_0000, 64 << 20),
         "kernel": (0x8008_0000, KERNEL[1]),
         "entry": 0x8008_0000, "kernel_mem": 1 << 20, "nics": [(mac1, "lan0", 9000)], "pmu": True,
         "weight": 512, "cap": 150, "realtime": (2000, 10_000)},
    ], quantum_ms=30, irqdist=0b111))
    # A config that uses the image files the target puts next to it.
    write("vmconfig", "files.toml", """[[vm]]
name = "vm0"
vcpus = 2
memory_size = "64M"
kernel = "files/Image"
initrd = "files/initrd.img"
cmdline = "console=ttyAMA0"
devices = ["pl011", "virtio-console", "virtio-rng"]
passthrough = ["/pl031@9010000"]

[[vm.disk]]
image = "files/disk.img"
size = "4K"
read_only = true

[[vm.disk]]
partition = "vm0-data"
image = "files/disk.img"
size = "2G"

[[vm.nic]]
network = "lan0"
mac = "52:54:00:12:34:56"
mtu = 9000

[[vm]]
name = "vm1"
vcpus = 1
cpu_affinity = [3]
memory_base = 0x8000_0000
memory_size = "32M"
kernel = "@testguest"

[[vm.nic]]
network = "lan0"
mtu = 9000
""")


# --- virtqueue: 16 control bytes, action bytes, then guest RAM (see virtqueue.rs) --------------
# ctl[0] device (0 rng, 1 console, 2 blk, 3 net), ctl[1] feature bits 28/29 (indirect,
# EVENT_IDX) for the parser-only pass, ctl[2] RAM chunk size, ctl[3] log2 queue size,
# ctl[4..10] desc/avail/used offsets (16-aligned, < 2 KiB), ctl[10] raw-address bits,
# ctl[11..14] driver features (ctl[14] bit 0: unfiltered, bit 1: blk on a disk completing
# when actions 6 and 7 say), ctl[15] action byte count. Queue q's rings are 2 KiB further on
# per q (rings end before 0x300, and 0xb00 for queue 1); buffers sit after them. Trailing zero
# bytes of RAM are left out.

RAM_BASE = 0x4000_0000
DESC, AVAIL, USED = 0x000, 0x100, 0x200
VRING_WRITE, VRING_NEXT = 2, 1


def virtqueue(device, chains, ops, queue_log2=3, features=0, ctl14=0):
    """chains: {queue: [[(buffer offset, len, writable, contents), ...], ...]}"""
    ram = bytearray(0x1000)
    for q, qchains in chains.items():
        shift = 0x800 * q
        desc_i = 0
        heads = []
        for chain in qchains:
            heads.append(desc_i)
            for k, (off, length, writable, contents) in enumerate(chain):
                flags = (VRING_WRITE if writable else 0) | (VRING_NEXT if k + 1 < len(chain) else 0)
                d = shift + DESC + 16 * desc_i
                ram[d:d + 16] = u64(RAM_BASE + off) + u32(length) + u16(flags) + u16(desc_i + 1)
                ram[off:off + len(contents)] = contents
                desc_i += 1
        a = shift + AVAIL
        ram[a:a + 4] = u16(0) + u16(len(heads))
        for i, h in enumerate(heads):
            ram[a + 4 + 2 * i:a + 6 + 2 * i] = u16(h)
    ctl = bytes([device, 0, 2, queue_log2]) + u16(DESC) + u16(AVAIL) + u16(USED) + bytes([0]) \
        + u32(features)[:4] + bytes([len(ops)])
    ctl = ctl[:14] + bytes([ctl14, len(ops)])
    return ctl + bytes(ops) + bytes(ram).rstrip(b"\0")


def virtqueue_seeds():
    # virtio-rng: one 64-byte writable buffer on queue 0, notified.
    write("virtqueue", "rng", virtqueue(0, {0: [[(0x300, 64, True, b"")]]}, [0, 0, 2, 0]))
    # virtio-console: "hello\n" on the transmit queue (1), a receive buffer on queue 0, input.
    write("virtqueue", "console", virtqueue(1, {
        0: [[(0x300, 32, True, b"")]],
        1: [[(0xb00, 6, False, b"hello\n")]],
    }, [0, 1, 0, 0, 6, 7, 0, 0]))
    # virtio-blk: read sector 1 (header IN, 512-byte data, status) and write sector 2.
    write("virtqueue", "blk", virtqueue(2, {0: [
        [(0x300, 16, False, u32(0) + u32(0) + u64(1)), (0x400, 512, True, b""),
         (0x310, 1, True, b"")],
        [(0x320, 16, False, u32(1) + u32(0) + u64(2)), (0x800, 512, False, b"\xab" * 512),
         (0x330, 1, True, b"")],
    ]}, [0, 0, 2, 0, 5, 0]))
    # The same two requests on a disk that completes later: notified, the write completed,
    # then the read with an error, then notified again.
    write("virtqueue", "blk-async", virtqueue(2, {0: [
        [(0x300, 16, False, u32(0) + u32(0) + u64(1)), (0x400, 512, True, b""),
         (0x310, 1, True, b"")],
        [(0x320, 16, False, u32(1) + u32(0) + u64(2)), (0x800, 512, False, b"\xab" * 512),
         (0x330, 1, True, b"")],
    ]}, [0, 0, 6, 1, 7, 0x80, 0, 0], ctl14=2))
    # virtio-net: a broadcast ARP frame after the 12-byte header on the transmit queue (1),
    # a receive buffer on queue 0, then a frame delivered to the guest.
    frame = b"\xff" * 6 + bytes([0x52, 0x54, 0, 0, 0, 1]) + b"\x08\x06" + bytes(28)
    write("virtqueue", "net", virtqueue(3, {
        0: [[(0x300, 0x500, True, b"")]],
        1: [[(0xb00, 12 + len(frame), False, bytes(12) + frame)]],
    }, [0, 1, 0, 0, 6, 8]))


# --- control_command: a flags byte, then lines; "!" VM KIND lines are the monitor's news ------

def control_seeds():
    # Console, default policies: a whole life with every command and its completions.
    write("control_command", "console-life", bytes([0]) + b"\n".join([
        b"list", b"start vm0", b"!0s", b"pause vm0", b"resume vm0", b"restart vm0", b"!0r",
        b"info vm0", b"stop vm0", b"!0d", b"log debug", b"help"]))
    # Commands that arrive while earlier work is under way: a queued stop, a stop during a
    # reset, a late completion, a late power-off.
    write("control_command", "concurrent", bytes([0]) + b"\n".join([
        b"start vm1", b"stop vm1", b"stop vm1", b"!1s", b"start vm1", b"!1d", b"start vm1",
        b"!1s", b"!1b", b"stop vm1", b"!1r", b"!1o", b"!1d"]))
    # on_crash = restart: a crash loop with its ticks.
    write("control_command", "crash-loop", bytes([4]) + b"\n".join(
        [b"start vm0", b"!0s"] + [b"!0cdata abort", b"!0d", b"!0t" + b" " * 200, b"!0s"] * 6))
    # The control VM ctl: acts on the others, restarts itself, is refused the rest.
    write("control_command", "control-vm", bytes([8 | 3]) + b"\n".join([
        b"start ctl", b"start vm1", b"!1s", b"stop vm1", b"restart ctl", b"pause ctl",
        b"info ctl", b"!1o"]))
    # Malformed lines.
    write("control_command", "malformed", bytes([0]) + b"\n".join([
        b"START vm0", b"stop", b"stop vm0 now", b"log verbose", b"start vm\xc3\xa9",
        b"start\x00vm0", b"info VM0", b"x" * 300, b"start nosuchvm"]))



# --- control_editor: a flags byte (bit 0: odd VM names), then the bytes typed -----------------

UP, DOWN, RIGHT = b"\x1b[A", b"\x1bOB", b"\x1b[C"


def editor_seeds():
    # Commands completed: verbs, VM names after a verb and focus, log levels, the listings.
    write("control_editor", "completion", bytes([0]) + b"".join([
        b"sta\tw\t\r", b"r\t\tsu\t\tvm\t\t1\t\r", b"focus \t\tc\t\r", b"log d\t\r",
        b"\t\tl\t\t", b"\x03", b"info x\t", b"\x15", b"list \t\r"]))
    # The history: lines again, blank lines, more than 16, browsed both ways and edited.
    write("control_editor", "history", bytes([0]) + b"".join(
        [b"list\r", b"stop vm0\r", b"list\r\n", b"  \r", b"\r"]
        + [b"info vm%d\r" % n for n in range(18)]
        + [UP * 20, DOWN * 3, b"\x7f\x7f9\r", UP, DOWN, DOWN, b"\x04"]))
    # Editing keys, escape sequences whole and cut short, non-ASCII, a line too long.
    write("control_editor", "keys", bytes([1]) + b"".join([
        b"stpo\x08\x08op", RIGHT, b"\x1b[1;5D\x1b[15~\x1bOP\x1bx", b" vm\t\t", b"\x1b[1\x03",
        b"x\x1b\r", "é".encode(), b"\x00\x01", b"a" * 300, b"\x15", b"\x7f\x04"]))


if __name__ == "__main__":
    for target in ["esr", "vgic_mmio", "device_tree", "vmconfig", "virtqueue", "control_command",
                   "control_editor"]:
        shutil.rmtree(os.path.join(SEEDS, target), ignore_errors=True)
    esr_seeds()
    vgic_seeds()
    device_tree_seeds()
    vmconfig_seeds()
    virtqueue_seeds()
    control_seeds()
    editor_seeds()
