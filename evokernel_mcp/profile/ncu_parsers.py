"""Pure parsers for Nsight Compute CSV exports.

- raw page (`ncu --import R --csv --page raw --print-units base`): row 1 = header ("ID","Process ID",
  "Process Name","Host Name","Kernel Name",...,<metric names>), row 2 = units, then one row per profiled
  kernel launch.
- details page with --metrics (long): "ID",...,"Kernel Name",...,"Metric Name","Metric Unit","Metric Value".
- source page (`--page source --print-source sass --csv`): optional banner row(s), then a header with
  "Address","Source" and per-instruction columns ("Warp Stall Sampling (All Samples)",
  "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", stall_* reason columns ...).
Values may carry thousands separators ("1,048,576"); "n/a" / "" -> missing. Lines starting with
"==PROF==" / "==WARNING==" (tool chatter) are skipped.
"""

from __future__ import annotations

import csv

from evokernel_mcp.errors import ParseError
from evokernel_mcp.profile.models import CounterDispatch, TraceInstruction

TOOL = "ncu"


def _rows(text: str, where: str) -> list[tuple[int, list[str]]]:
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip() and not ln.startswith("==")]
    first = next((k for k, (_, ln) in enumerate(lines) if ln.startswith('"')), None)
    lines = lines[first:] if first is not None else []
    if not lines:
        raise ParseError(TOOL, where, message="no CSV rows (did ncu profile any kernel? check --kernel-name)")
    out = []
    for i, ln in lines:
        try:
            out.append((i, next(csv.reader([ln], strict=True))))
        except (csv.Error, StopIteration) as e:
            # ncu writes a source line's text between quotes without doubling the quotes inside it (recorded:
            # tests/fixtures/cuda/ncu_source_cuda_sass_quotes_h100.csv): its fields split on '","', the text's own
            # '","' put back by the reader that knows the columns (_merge_text)
            if len(ln) > 1 and ln.startswith('"') and ln.rstrip().endswith('"'):
                out.append((i, ln.rstrip()[1:-1].split('","')))
                continue
            raise ParseError(TOOL, f"{where} line {i}", message=f"malformed CSV: {e}") from None
    return out


def _merge_text(r: list[str], n: int, text_i: int) -> list[str]:
    """A row split into more fields than the header's n: the surplus came from '","' inside the free-text
    field at text_i (a source line), joined back."""
    extra = len(r) - n
    if extra <= 0:
        return r
    return r[:text_i] + ['","'.join(r[text_i:text_i + extra + 1])] + r[text_i + extra + 1:]


def number(raw: str) -> float | None:
    s = raw.strip().replace(",", "")
    if s in ("", "n/a", "N/A", "nan"):
        return None
    return float(s)


def _num(raw: str, where: str) -> float | None:
    try:
        return number(raw)
    except ValueError:
        raise ParseError(TOOL, where, message=f"{raw!r} is not a number") from None


ID_COLS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
           "Grid Size", "Device", "CC", "Kernel Time", "Section Name", "Function Name", "Demangled Name",
           "Estimated Speedup", "Estimated Speedup Type", "Rule Name", "Rule Type", "Rule Description")


_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def unit_scale(unit: str) -> float:
    """Factor to base units (ns for time, byte for sizes; rates keep their '/s' denominator):
    'us' -> 1e3, 'Mbyte' -> 1e6, 'Tbyte/s' -> 1e12. Unknown units -> 1."""
    head = unit.split("/", 1)[0].strip()
    if head in _TIME:
        return _TIME[head]
    if head[:1] in _PREFIX and head[1:] in ("byte", "sector", "inst", "cycle", "hz", "Hz"):
        return _PREFIX[head[:1]]
    return 1.0


def metric_name(column: str) -> str:
    """Strip a section qualifier: 'SM_B.TriageCompute.l1tex__t_sectors.sum' -> 'l1tex__t_sectors.sum'."""
    parts = column.split(".")
    for i, p in enumerate(parts):
        if "__" in p:
            return ".".join(parts[i:])
    return column


def _dims(s: str) -> int | None:
    try:
        vals = [int(x) for x in s.strip("() ").replace(" ", "").split(",") if x]
    except ValueError:
        return None
    out = 1
    for v in vals:
        out *= v
    return out if vals else None


def parse_ncu_raw_csv(text: str, where: str = "raw.csv") -> list[CounterDispatch]:
    """Raw page (wide) or details page (long, Metric Name/Value) -> one record per profiled launch."""
    rows = _rows(text, where)
    start = next((k for k, (_, r) in enumerate(rows) if "ID" in r and "Kernel Name" in r), 0)
    rows = rows[start:]  # the profiled program's own stdout may precede the CSV
    header = rows[0][1]
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_long(rows, where)
    if "Kernel Name" not in header or "ID" not in header:
        raise ParseError(TOOL, f"{where} line {rows[0][0]} (header)", message=f"no 'ID'/'Kernel Name' column: {header[:6]}")
    body = rows[1:]
    units = {}
    if body and body[0][1] and not body[0][1][0].strip().isdigit():  # units row
        units = dict(zip(header, body[0][1]))
        body = body[1:]
    out = []
    for line, r in body:
        if len(r) != len(header):
            raise ParseError(TOOL, f"{where} line {line}", message=f"{len(r)} fields, header has {len(header)}")
        rec = dict(zip(header, r))
        counters = {}
        for k, v in rec.items():
            if k in ID_COLS or "__" not in k:
                continue
            try:
                val = number(v)
            except ValueError:
                continue  # raw pages carry a few text-valued attributes (names, enums)
            if val is not None:
                counters[metric_name(k)] = val * unit_scale(units.get(k, ""))
        out.append(_dispatch(rec, counters, where, line))
    return out


def _dispatch(rec: dict[str, str], counters: dict[str, float], where: str, line: int) -> CounterDispatch:
    try:
        did = int(rec["ID"])
    except ValueError:
        raise ParseError(TOOL, f"{where} line {line} field ID", message=f"{rec['ID']!r} is not an integer") from None
    dur = counters.get("gpu__time_duration.sum")
    return CounterDispatch(dispatch_id=did, kernel=rec["Kernel Name"], agent=rec.get("Device", ""),
                           grid_size=_dims(rec.get("Grid Size", "")) or 0,
                           workgroup_size=_dims(rec.get("Block Size", "")) or 0, counters=counters,
                           duration_ns=int(dur) if dur is not None else None,
                           grid=rec.get("Grid Size") or None, block=rec.get("Block Size") or None)


# Values that describe the device or the profiler, not the kernel: the same for every dispatch.
STATIC_PREFIXES = ("device__attribute_", "c2clink__", "nvlink__", "numa__", "profiler__")


def is_static(name: str) -> bool:
    """True for a static value (device attribute, link topology, profiler bookkeeping, a metric's
    `.peak_sustained` constant), False for a measured counter."""
    return name.startswith(STATIC_PREFIXES) or name.endswith(".peak_sustained")


def split_static(counters: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """-> (measured counters, static values)."""
    measured, static = {}, {}
    for k, v in counters.items():
        (static if is_static(k) else measured)[k] = v
    return measured, static


def _parse_long(rows: list[tuple[int, list[str]]], where: str) -> list[CounterDispatch]:
    header = rows[0][1]
    by_id: dict[str, tuple[dict[str, str], dict[str, float], int]] = {}
    need = header.index("Metric Value") + 1
    for line, r in rows[1:]:
        if len(r) > len(header) or len(r) < need:
            raise ParseError(TOOL, f"{where} line {line}", message=f"{len(r)} fields, header has {len(header)}")
        rec = dict(zip(header, r + [""] * (len(header) - len(r))))  # details rows omit empty rule columns
        ent = by_id.setdefault(rec["ID"], (rec, {}, line))
        try:
            val = number(rec["Metric Value"])
        except ValueError:
            if "__" in rec["Metric Name"]:
                raise ParseError(TOOL, f"{where} line {line} field Metric Value",
                                 message=f"{rec['Metric Value']!r} is not a number") from None
            continue  # details page: text-valued entries
        if val is None:
            continue
        ent[1][rec["Metric Name"]] = val * unit_scale(rec.get("Metric Unit", ""))
    return [_dispatch(rec, c, where, line) for rec, c, line in by_id.values()]


def device_names(text: str, where: str = "raw.csv") -> list[str]:
    """The distinct device__attribute_display_name values of a raw-page CSV (e.g. ['NVIDIA H200']); [] when
    the column is absent."""
    rows = _rows(text, where)
    start = next((k for k, (_, r) in enumerate(rows) if "ID" in r and "Kernel Name" in r), 0)
    header = rows[start][1]
    if "device__attribute_display_name" not in header:
        return []
    i = header.index("device__attribute_display_name")
    vals = [r[i].strip() for _, r in rows[start + 1:] if len(r) == len(header) and r[0].strip().isdigit()]
    return list(dict.fromkeys(v for v in vals if v))


def parse_ncu_source_csv(text: str, where: str = "source.csv") -> list[TraceInstruction]:
    """Source page -> per-SASS-instruction rows. cycles = warp-stall samples (All Samples).

    Two views: `--print-source sass` (header "Address","Source",<metrics>; one row per instruction) and
    `--print-source cuda,sass` (per source file a "File Path" row, a header "Line No","Source","Address",
    "Source",<metrics>, then each source line (its number and text, Address "-", with the sum of its
    instructions) followed by its SASS rows (Line No empty, Address 0x...)). In the second view each
    instruction carries `file:line`; the source-line rows are sums and are not counted again. That layout is
    as recorded on an H100 (tests/fixtures/cuda/ncu_source_cuda_sass_quotes_h100.csv: ncu leaves the quotes
    inside a source line's text undoubled), and collect.py falls back to the sass view when it yields no line
    info. An instruction of an inlined function appears there twice, under the function's line and again under
    its call site's, with the same counts (seen on an H100 with ncu 2025.3.1); it is read once, under the line that
    comes first, so per-line and per-class shares do not count it twice."""
    rows = _rows(text, where)
    if not any(r and r[0].strip() == "Line No" for _, r in rows):
        return _parse_sass_view(rows, where)
    return _parse_cuda_sass_view(rows, where)


def _columns(header: list[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    samples = next((h for h in header if h.startswith("Warp Stall Sampling (All")), None)
    not_issued = next((h for h in header if h.startswith("Warp Stall Sampling (Not")), None)
    execd = "Instructions Executed" if "Instructions Executed" in header else None
    reasons = [h for h in header if (h.startswith("stall_") or h.startswith("smsp__pcsamp_warps_issue_stalled_"))
               and not h.endswith("_not_issued") and not h.endswith("(Not Issued)")]
    return samples, not_issued, execd, reasons


def _instruction(k: int, r: list[str], col: dict[str, int], cols, addr_i: int, src_i: int, w: str,
                 source: str | None = None, source_text: str | None = None) -> TraceInstruction:
    samples, not_issued, execd, reasons = cols
    addr_raw = r[addr_i].strip()
    try:
        addr = int(addr_raw, 16) if addr_raw.lower().startswith("0x") else (int(addr_raw) if addr_raw else None)
    except ValueError:
        addr = None
    rs = {}
    for h in reasons:
        v = _num(r[col[h]], f"{w} field {h}")
        if v:
            rs[h.removeprefix("smsp__pcsamp_warps_issue_stalled_").removeprefix("stall_")] = v
    ways = None
    if "L1 Conflicts Shared N-Way" in col:
        try:
            ways = number(r[col["L1 Conflicts Shared N-Way"]])
        except ValueError:
            ways = None
    return TraceInstruction(
        index=k, instruction=r[src_i].strip(), address=addr, shared_conflict_ways=ways,
        hits=int(_num(r[col[execd]], f"{w} field {execd}") or 0) if execd else 0,
        cycles=(_num(r[col[samples]], f"{w} field {samples}") or 0.0) if samples else 0.0,
        stall_cycles=_num(r[col[not_issued]], f"{w} field {not_issued}") if not_issued else None,
        stall_reasons=rs, source=source, source_text=source_text,
    )


def _parse_sass_view(rows: list[tuple[int, list[str]]], where: str) -> list[TraceInstruction]:
    hidx = next((k for k, (_, r) in enumerate(rows) if "Source" in r and "Address" in r), None)
    if hidx is None:
        raise ParseError(TOOL, where, message="no header row with 'Address' and 'Source' (was --print-source sass "
                         "given to an import of a report with SourceCounters?)")
    header = [h.strip() for h in rows[hidx][1]]
    col = {h: i for i, h in enumerate(header)}
    cols = _columns(header)
    out = []
    for k, (line, r) in enumerate(rows[hidx + 1:]):
        if len(r) != len(header):
            raise ParseError(TOOL, f"{where} line {line}", message=f"{len(r)} fields, header has {len(header)}")
        out.append(_instruction(k, r, col, cols, col["Address"], col["Source"], f"{where} line {line}"))
    return out


def _parse_cuda_sass_view(rows: list[tuple[int, list[str]]], where: str) -> list[TraceInstruction]:
    out: list[TraceInstruction] = []
    header: list[str] | None = None
    col: dict[str, int] = {}
    cols = None
    file, lineno, text = "?", None, None
    addr_i = src_i = 0
    seen: set[str] = set()  # addresses already read: each instruction counts once, under its first line
    for line, r in rows:
        first = r[0].strip() if r else ""
        if first == "File Path":
            file = r[1].strip() if len(r) > 1 else "?"
            continue
        if first in ("Function Name", "Kernel Name"):
            continue
        if first == "Line No":
            header = [h.strip() for h in r]
            col = {h: i for i, h in enumerate(header)}  # duplicate "Source": the SASS text (the later one) wins
            if "Address" not in col:
                raise ParseError(TOOL, f"{where} line {line}", message="cuda,sass header without 'Address'")
            addr_i, src_i = col["Address"], max(i for i, h in enumerate(header) if h == "Source")
            cols = _columns(header)
            continue
        if header is None:
            continue
        w = f"{where} line {line}"
        if first and len(r) > len(header):  # a source line whose text held '","' (unescaped quotes)
            r = _merge_text(r, len(header), 1)
        is_sass = len(r) > addr_i and r[addr_i].strip().lower().startswith("0x")  # source rows show "-" there
        if len(r) != len(header):
            if is_sass and not first:  # an instruction row that does not fit the header
                raise ParseError(TOOL, w, message=f"{len(r)} fields, header has {len(header)}")
            continue  # a short elision row
        if first:  # a source line: its number and text; its counters are the sum of the SASS rows below it
            try:
                lineno, text = int(first.replace(",", "")), r[1].strip()[:160]
            except ValueError:
                pass  # an elision row ("...") between source lines
            continue
        if not is_sass:
            continue
        addr = r[addr_i].strip().lower()
        if addr in seen:  # an inlined instruction is listed again under its call site, with the same counts
            continue
        seen.add(addr)
        src = f"{file.rsplit('/', 1)[-1]}:{lineno}" if lineno is not None else None
        out.append(_instruction(len(out), r, col, cols, addr_i, src_i, w, src, text))
    if header is None:
        raise ParseError(TOOL, where, message="no 'Line No' header in the cuda,sass source view")
    return out


def has_line_info(rows: list[TraceInstruction]) -> bool:
    return any(r.source for r in rows)
