"""The top GPU kernels on the roofline: achieved FLOP/s and bytes/s against the device's peaks,
arithmetic intensity, and which side of the ridge point each kernel sits on.

From :func:`advisor.analysis.mfu.kernel_efficiency` (the numbers) and the peak tables of
:mod:`advisor.analysis.mfu` (their sources); the template only lays the rows out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from advisor import units
from advisor.analysis.mfu import kernel_efficiency, peak_bandwidth

from .ops_view import TOP_KERNELS, short_name

if TYPE_CHECKING:
    from advisor.profile import Profile


@dataclass
class RooflineRow:
    """One kernel: its rates, their share of the peaks, its intensity and bound."""

    name: str
    full_name: str
    time: str
    flops_rate: str  # achieved, "12.3 TFLOP/s"
    flops_of_peak: str  # "78%" of the dtype's peak, or a dash
    bytes_rate: str  # achieved, "0.81 TB/s"
    bytes_of_peak: str
    intensity: str  # FLOP/byte
    dtype: str
    bound: str  # "memory", "compute" or a dash
    bound_class: str  # styling: bound-memory, bound-compute, bound-unknown


@dataclass
class RooflineTable:
    """The kernels, the device's peaks and ridge point, and where the peaks come from."""

    caption: str
    peaks: str
    rows: list[RooflineRow]


def roofline_table(profile: Profile | None) -> RooflineTable | None:
    """The roofline of the trace's top kernels; None without GPU kernels."""
    if profile is None or profile.trace is None or not profile.has_gpu or profile.kernels.empty:
        return None
    eff = kernel_efficiency(profile, TOP_KERNELS)
    if eff.empty:
        return None
    device = profile.env.device_name
    bandwidth, source = peak_bandwidth(device)
    rows = [RooflineRow(
        name=short_name(str(r["name"])), full_name=str(r["name"]), time=units.time_us(r["dur_us"]),
        flops_rate=_rate(r["tflops"], "FLOP/s"), flops_of_peak=_of(r["tflops"], r["peak_tflops"]),
        bytes_rate=_rate(r["tbps"], "B/s"), bytes_of_peak=_of(r["tbps"], r["peak_tbps"]),
        intensity=units.number(r["intensity"], 1) if r["intensity"] == r["intensity"] else units.DASH,
        dtype=str(r["dtype"] or units.DASH), bound=str(r["bound"] or units.DASH), bound_class=f"bound-{r['bound'] or 'unknown'}",
    ) for _, r in eff.iterrows()]
    ridges = eff.dropna(subset=["ridge"]).drop_duplicates("dtype")
    ridge_words = ", ".join(f"{d} {units.number(x, 1)} FLOP/byte" for d, x in zip(ridges["dtype"], ridges["ridge"]))
    peaks = (f"{device}: {units.number(bandwidth, 2)} TB/s ({source}); ridge point {ridge_words or units.DASH}"
             if bandwidth else f"{device or 'this device'}: no memory-bandwidth entry in the peak table, so no ridge point")
    caption = ("achieved rates over each kernel's own time; FLOPs are the op's (the direct algorithm's count, so "
               "Winograd or FFT kernels can pass the peak), bytes the least the op must move (each input read and "
               "the output written once), so the intensity is an upper bound; ops with no FLOP count (elementwise, "
               "norms) are taken at one FLOP per output element; left of the ridge a kernel is memory-bound")
    return RooflineTable(caption, peaks, rows)


def _rate(tera: float | None, unit: str) -> str:
    if tera != tera or tera is None:
        return units.DASH
    for prefix, scale in (("T", 1.0), ("G", 1e-3), ("M", 1e-6)):
        if tera >= scale:
            return f"{tera / scale:.2f} {prefix}{unit}"
    return f"{tera * 1e9:.0f} k{unit}"


def _of(achieved: float, peak: float) -> str:
    if achieved != achieved or peak != peak or not peak:
        return units.DASH
    return units.frac(achieved / peak, 1)
