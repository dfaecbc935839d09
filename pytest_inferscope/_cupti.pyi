"""Type stub for the native CUPTI collector, `native/_cupti.c` (see native/README.md)."""

from typing import Final

#: CUPTI_API_VERSION of the headers the extension was compiled against (e.g. 130001).
API_VERSION: Final[int]
#: Bytes per record: the size of events.EVENT_DTYPE (48).
RECORD_SIZE: Final[int]
#: field -> (offset, size) of the C record, to check against events.EVENT_DTYPE.
RECORD_LAYOUT: Final[dict[str, tuple[int, int]]]
#: {"runtime": {name: cbid}, "driver": {name: cbid}}: the API calls recorded (unless INFERSCOPE_CUPTI_ALL_API=1),
#: compiled from the CUPTI headers by name.
TRACED_APIS: Final[dict[str, dict[str, int]]]

class CuptiError(RuntimeError):
    """libcupti cannot be loaded (the message lists every place tried), or a CUPTI call failed."""

class CuptiBusyError(CuptiError):
    """CUPTI is held by another profiler in this process (torch.profiler/Kineto, Nsight, ...)."""

def load(path: str | None = None) -> str:
    """Load libcupti once (the copy already in the process first) and check its API version; returns its path."""

def library() -> str | None:
    """Path of the loaded libcupti, or None before `load`."""

def version() -> str:
    """The compiled CUPTI API version, the loaded library's version and path, and which API calls are recorded."""

class Collector:
    """CUPTI activity records, decoded in C into EVENT_DTYPE records. One may collect at a time per process."""

    def __init__(self, buffer_size: int = 8 << 20, max_records: int = 0, *, driver: bool = True) -> None:
        """`buffer_size`: bytes per CUPTI buffer; `max_records`: cap between drains (0: none; beyond it
        records are counted as dropped); `driver`: also record driver API calls (JAX, Triton launches)."""

    def start(self) -> None:
        """Enable collection; raises CuptiBusyError if another CUPTI client holds CUPTI, CuptiError otherwise.

        Runtime and driver API records only for TRACED_APIS, unless INFERSCOPE_CUPTI_ALL_API=1 (read here)."""

    def stop(self) -> None:
        """Flush, disable, force-flush. Does not synchronise the device (the caller does). Idempotent."""

    def drain(self) -> tuple[bytearray, list[str]]:
        """Records since the last drain (view with np.frombuffer(buf, EVENT_DTYPE)) and the full names list."""

    def dropped(self) -> int:
        """Records lost since start: CUPTI's dropped count plus records beyond `max_records`."""

    def incomplete(self) -> int:
        """Records since start with end == 0 or end < start (still running at a forced flush); still emitted."""

    def timestamp(self) -> int:
        """cuptiGetTimestamp(): ns, unless another client (Kineto) replaced CUPTI's timestamp source."""

    def enabled(self) -> list[str]:
        """CUPTI activity kinds the last start() enabled (optional ones the device lacks are left out)."""

    def set_api_records(self, on: bool) -> None:
        """While collecting: runtime/driver API records off (False) or on again (True), the same calls traced.

        Kernel, copy, memset, synchronisation and memory records go on either way."""

    def api_records(self) -> str:
        """Which runtime/driver API calls the last start() records, per domain: the traced calls only, or every
        call and why (INFERSCOPE_CUPTI_ALL_API=1, a libcupti without per-API enabling); "" before any start."""

    def _decode(self, buffer: bytes | bytearray | memoryview, name_limit: int = 0, /) -> tuple[bytearray, list[str]]:
        """Test only: run the CUPTI-buffer decoder over a synthetic activity buffer, then drain."""
