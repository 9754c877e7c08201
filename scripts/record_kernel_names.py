"""Record the distinct GPU kernel names of the shared real traces as a small test fixture.

tests/collectors/traces/test_comm_kernels.py checks that none of these compute kernels (GEMMs, convolutions, elementwise,
reductions, attention, Triton, MTIA) is taken for communication except NCCL's own, without needing the
shared corpus. Re-run after the corpus changes:

    python scripts/record_kernel_names.py ../shared/traces/hta tests/fixtures/kernels/shared_trace_kernel_names.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

KERNEL_CATEGORIES = {"kernel", "mtia_ccp_events"}


def kernel_names(root: Path) -> dict[str, list[str]]:
    """Distinct kernel names per trace file (relative path), sorted."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.json*")):
        if "expected_hta" in path.parts or path.name.endswith(("_et.json.gz", "_et.json")):
            continue
        try:
            raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
            doc = json.loads(raw)
        except (OSError, ValueError):
            continue
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
        names = {str(e.get("name", "")) for e in events
                 if isinstance(e, dict) and str(e.get("cat", "")).lower() in KERNEL_CATEGORIES}
        if names:
            found[str(path.relative_to(root))] = sorted(names)
    return found


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"source": "the shared HTA test traces (../shared/traces/hta, PROVENANCE.md there)",
            "made_by": "scripts/record_kernel_names.py", "kernels": kernel_names(root)}
    out.write_bytes(gzip.compress(json.dumps(data, indent=0, sort_keys=True).encode(), mtime=0))
    print(f"{sum(len(v) for v in data['kernels'].values())} names from {len(data['kernels'])} traces -> {out}")


if __name__ == "__main__":
    main()
