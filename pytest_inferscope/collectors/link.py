"""The host<->device link of the GPUs a test used, from sysfs, for the transfer rule's bandwidth.

A PCIe link's peak per direction is lanes x transfer rate x line-code efficiency / 8. The link
a device trains to is capped by its upstream port, so both ends count; and a GPU drops its link
to a lower rate when idle, so the maximum rates are read, not the current ones. Where sysfs has
no link (NVLink-C2C on Grace Hopper, a virtual machine without the bridge, a GPU not on PCIe)
nothing is recorded and the analyzer falls back to its nominal link, raised to the fastest copy
measured (analyzer/context_gpu.py).
"""

from __future__ import annotations

import functools
from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")
#: PCIe generation by transfer rate (GT/s) and its line-code efficiency (8b/10b up to gen 2,
#: 128b/130b for gen 3 to 5, FLIT mode 242/256 for gen 6).
GENERATIONS = {2.5: (1, 0.8), 5.0: (2, 0.8), 8.0: (3, 128 / 130), 16.0: (4, 128 / 130), 32.0: (5, 128 / 130),
               64.0: (6, 242 / 256)}  # fmt: skip


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _end(device: Path) -> tuple[float, int] | None:
    """(GT/s, lanes) a PCI function can train to, or None where sysfs says nothing usable."""
    speed, width = _read(device / "max_link_speed"), _read(device / "max_link_width")
    try:
        gts, lanes = float((speed or "").split()[0]), int(width or "")
    except (ValueError, IndexError):
        return None
    return (gts, lanes) if gts in GENERATIONS and lanes > 0 else None


@functools.lru_cache(maxsize=64)
def pcie_link(bus_id: str, root: Path = SYSFS_PCI) -> tuple[float, str] | None:
    """(GB/s per direction, description) of the PCIe link of the device at `bus_id`, e.g. '0000:3B:00.0'.

    Read once a process per device (the maxima do not change; the eight sysfs reads took ~0.9 ms a test on the
    H200 host, 2026-11-28)."""
    device = root / bus_id.lower()
    own = _end(device)
    if own is None:
        return None
    parent = _end(device.resolve().parent)  # the upstream port (a root complex has no link files)
    gts, lanes = own if parent is None else (min(own[0], parent[0]), min(own[1], parent[1]))
    gen, efficiency = GENERATIONS[gts]
    return gts * lanes * efficiency / 8, f"PCIe {gen}.0 x{lanes} ({bus_id})"


def link_meta(bus_ids: list[str], root: Path = SYSFS_PCI) -> dict[str, object]:
    """What Collection.stop adds to the trace's metadata: the slowest link among the devices used."""
    links = [link for link in (pcie_link(b, root) for b in bus_ids) if link is not None]
    if not links:
        return {}
    gb_s, what = min(links)
    return {"link_gb_s": round(gb_s, 2), "link": what}
