"""The PCIe link's peak from sysfs (collectors/link.py), on fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.collectors import Collection, CollectionOptions
from pytest_inferscope.collectors.link import link_meta, pcie_link


def port(path: Path, speed: str | None, width: str | None) -> Path:
    path.mkdir(parents=True)
    if speed is not None:
        (path / "max_link_speed").write_text(speed + "\n")
    if width is not None:
        (path / "max_link_width").write_text(width + "\n")
    return path


def tree(tmp_path: Path, gpu: tuple[str, str], bridge: tuple[str, str] | None, bus: str = "0000:3b:00.0") -> Path:
    """/sys/devices/pci0000:00/<bridge>/<gpu>, and /sys/bus/pci/devices/<bus> linking to the GPU."""
    top = tmp_path / "devices" / "pci0000:00"
    parent = port(top / "0000:00:01.0", *bridge) if bridge else top
    device = port(parent / bus, *gpu)
    devices = tmp_path / "bus"
    devices.mkdir(exist_ok=True)
    (devices / bus).symlink_to(device)
    return devices


def test_gen5_x16_behind_a_gen5_port_is_63_gb_per_s(tmp_path: Path) -> None:
    root = tree(tmp_path, ("32.0 GT/s PCIe", "16"), ("32.0 GT/s PCIe", "16"))
    gb_s, what = pcie_link("0000:3B:00.0", root) or (0.0, "")
    assert gb_s == pytest.approx(32 * 16 * 128 / 130 / 8) and what == "PCIe 5.0 x16 (0000:3B:00.0)"


def test_the_slower_end_sets_the_link(tmp_path: Path) -> None:
    root = tree(tmp_path, ("32.0 GT/s PCIe", "16"), ("16.0 GT/s PCIe", "8"))
    gb_s, what = pcie_link("0000:3b:00.0", root) or (0.0, "")
    assert gb_s == pytest.approx(16 * 8 * 128 / 130 / 8) and what.startswith("PCIe 4.0 x8")


NO_LINK = [(None, "16"), ("Unknown", "16"), ("32.0 GT/s PCIe", "0"), ("7 GT/s", "4")]


@pytest.mark.parametrize(("speed", "width"), NO_LINK)
def test_no_usable_link_records_nothing(tmp_path: Path, speed: str | None, width: str) -> None:
    root = tree(tmp_path, (speed, width), None)  # type: ignore[arg-type]
    assert pcie_link("0000:3b:00.0", root) is None
    assert link_meta(["0000:3b:00.0", "0000:99:00.0"], root) == {}


def test_link_meta_keeps_the_slowest_device(tmp_path: Path) -> None:
    root = tree(tmp_path, ("32.0 GT/s PCIe", "16"), None)
    tree(tmp_path / "b", ("8.0 GT/s PCIe", "16"), None, bus="0000:5e:00.0")
    (root / "0000:5e:00.0").symlink_to((tmp_path / "b" / "bus" / "0000:5e:00.0").resolve())
    meta = link_meta(["0000:3b:00.0", "0000:5e:00.0"], root)
    assert meta == {"link_gb_s": round(8 * 16 * 128 / 130 / 8, 2), "link": "PCIe 3.0 x16 (0000:5e:00.0)"}


def test_a_collection_records_the_cores_it_may_use() -> None:
    coll = Collection(CollectionOptions(cpu="off"))
    coll.start()
    raw = coll.stop()
    assert raw.meta["cpu_affinity"] >= 1 and "link_gb_s" not in raw.meta  # no GPU collected, no link


def test_a_devices_link_is_read_once_a_process(tmp_path: Path) -> None:
    # The maxima are the hardware's: read at the first test's stop, not at every test's (~0.9 ms on the H200 host).
    root = tree(tmp_path, ("32.0 GT/s PCIe", "16"), ("32.0 GT/s PCIe", "16"))
    first = pcie_link("0000:3b:00.0", root)
    for f in (tmp_path / "devices").rglob("max_link_*"):
        f.unlink()
    assert pcie_link("0000:3b:00.0", root) == first is not None
