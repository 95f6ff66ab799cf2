"""Tests for advisor.trace on real Kineto traces (no mocks).

The third-party traces are found by conftest.trace_path: a licensed subset ships
in tests/data/traces (see its README), the rest is read from the shared folder
($ADVISE_SHARED_TRACES or ../shared/traces next to the repo); tests on those skip
loudly when it is absent, and CI fails.  Every trace in either folder, and every
file named in EXPECT, gets one parametrized test.  Each file is loaded
exactly once per test session: all checks on a file run in its one
parametrized test (its README expectations are listed in EXPECT), so xdist
never loads the same big file in two workers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math

import numpy as np
import pandas as pd
import pytest

from advisor.trace import nesting
from advisor.trace import TraceError, TraceFrames, interval_union_us, load_trace
from conftest import SHARED_TRACES, SHIPPED_TRACES, known_traces, trace_path

COLUMNS = {
    "ops": ["name", "ts_us", "dur_us", "end_us", "self_us", "depth", "pid", "tid", "external_id",
            "input_dims", "input_types", "flops", "step"],
    "kernels": ["name", "ts_us", "dur_us", "end_us", "device", "stream", "correlation", "step",
                "grid", "block", "registers_per_thread"],
    "memcpy": ["name", "kind", "src", "dst", "bytes", "ts_us", "dur_us", "end_us", "device", "stream",
               "correlation", "step"],
    "runtime": ["name", "ts_us", "dur_us", "end_us", "pid", "tid", "correlation", "step"],
    "annotations": ["name", "cat", "ts_us", "dur_us", "end_us", "pid", "tid", "step"],
    "python": ["name", "ts_us", "dur_us", "end_us", "pid", "tid", "step"],
    "memory": ["ts_us", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"],
    "steps": ["index", "ts_us", "dur_us", "end_us", "data_wait_us", "optimizer_us", "gpu_busy_us",
              "kernel_us", "n_kernels", "device_dur_us", "device_data_wait_us", "device_optimizer_us"],
}
META_KEYS = {"device_properties", "distributed", "rank", "world_size", "display_time_unit",
             "base_time_ns", "trace_span_us", "n_events", "has_gpu", "source", "skipped_events", "warnings"}
MEMCPY_KINDS = {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Memset", "other"}
MEM_SIDES = {"Pageable", "Pinned", "Device", "Managed", ""}


def _share(steps: pd.DataFrame, col: str) -> float:
    """Time-weighted share of all steps spent in `col`."""
    return float(steps[col].sum() / steps["dur_us"].sum())


# ----------------------------------------------------------------------------
# Per-file expectations, from the shared traces README ("measured here" numbers,
# loosened to ranges) and tb_plugin's expected output.


def _resnet_common(t: TraceFrames) -> None:
    s = t.steps
    assert len(s) == 6
    assert s["index"].diff().dropna().eq(1).all()
    htod = t.memcpy[t.memcpy["kind"] == "HtoD"]
    assert len(htod) > 0 and htod["src"].isin(["Pageable", "Pinned"]).all()
    assert (htod["dst"] == "Device").all() and (htod["bytes"] > 0).all()
    assert (t.memcpy["kind"] == "Memset").any()
    # FLOPs from recorded shapes (old layout: no "Concrete Inputs").
    f = t.ops.groupby("name")["flops"].sum()
    assert f.get("aten::conv2d", 0) > 0 and f.get("aten::addmm", 0) > 0 and f.get("aten::mm", 0) > 0
    # counted once per conv chain: the inner convolution ops carry no FLOPs
    assert t.ops.loc[t.ops["name"] == "aten::cudnn_convolution", "flops"].isna().all()
    # ResNet-50 forward at batch 32 is ~262 GFLOP (4.1 GMAC/image)
    first = s["index"].iloc[0]
    conv = t.ops[(t.ops["name"] == "aten::conv2d") & (t.ops["step"] == first)]
    assert 230e9 < conv["flops"].sum() < 290e9
    # fc layer: addmm [32, 2048] x [2048, 1000]
    fc = t.ops[t.ops["name"] == "aten::addmm"].iloc[0]
    assert fc["flops"] == 2 * 32 * 2048 * 1000
    assert t.meta["has_gpu"] and t.meta["rank"] is None and t.meta["distributed"] == {}
    assert len(t.memory) > 0 and len(t.annotations) == 24  # old-layout ranges moved here
    assert not t.ops["name"].str.startswith("ProfilerStep#").any()


def expect_resnet_nw0_first(t: TraceFrames) -> None:
    _resnet_common(t)
    assert t.steps["index"].tolist() == [5, 6, 7, 8, 9, 10]
    assert 0.25 <= _share(t.steps, "data_wait_us") <= 0.45
    assert 0.45 <= _share(t.steps, "gpu_busy_us") <= 0.70
    # tb_plugin: average step 177,592 us
    assert 150_000 < t.steps["dur_us"].mean() < 200_000


def expect_resnet_nw0_second(t: TraceFrames) -> None:
    _resnet_common(t)
    assert t.steps["index"].tolist() == [16, 17, 18, 19, 20, 21]
    assert 0.20 <= _share(t.steps, "data_wait_us") <= 0.40
    assert 0.45 <= _share(t.steps, "gpu_busy_us") <= 0.75


def expect_resnet_nw4(t: TraceFrames) -> None:
    _resnet_common(t)
    assert _share(t.steps, "data_wait_us") < 0.05
    assert 0.45 <= _share(t.steps, "gpu_busy_us") <= 0.90


def expect_ns_resolution(t: TraceFrames) -> None:
    assert t.meta["display_time_unit"] == "ns"
    assert len(t.steps) == 5
    assert _share(t.steps, "gpu_busy_us") > 0.90
    # ns resolution is kept: timestamps are fractional microseconds
    assert (t.kernels["ts_us"] % 1 != 0).any()


def expect_ml_fp32(t: TraceFrames) -> None:
    assert len(t.steps) == 3  # the gpu_user_annotation copies are not steps
    assert _share(t.steps, "data_wait_us") > 0.50
    assert _share(t.steps, "gpu_busy_us") < 0.40
    assert (t.memcpy["src"] == "Pinned").any()
    addmm = t.ops[t.ops["name"] == "aten::addmm"]
    assert (addmm["flops"] == 2 * 512 * 784 * 2048).any()


def expect_ml_amp(t: TraceFrames) -> None:
    assert len(t.steps) == 3
    assert _share(t.steps, "data_wait_us") > 0.60
    assert (t.annotations["cat"] == "gpu_user_annotation").any()


def expect_deepseek(t: TraceFrames) -> None:
    assert len(t.steps) == 1 and t.steps["index"].iloc[0] == 1
    assert t.meta["rank"] == 0 and t.meta["world_size"] == 64
    assert _share(t.steps, "gpu_busy_us") > 0.95
    assert t.steps["n_kernels"].iloc[0] == len(t.kernels) == 963
    assert len(t.meta["device_properties"]) == 8


def expect_cpu_only(t: TraceFrames) -> None:
    assert t.meta["has_gpu"] is False
    assert t.kernels.empty and t.memcpy.empty
    assert len(t.steps) >= 1 and (t.steps["gpu_busy_us"] == 0).all()
    assert (t.steps["n_kernels"] == 0).all()


def expect_cpu_only_history(t: TraceFrames) -> None:
    expect_cpu_only(t)
    assert len(t.steps) == 5 and (t.steps["optimizer_us"] > 0).all()


def expect_no_distributed_info(t: TraceFrames) -> None:
    expect_cpu_only(t)
    assert t.meta["distributed"] == {} and t.meta["rank"] is None
    assert (t.steps["data_wait_us"] > 0).all()


def expect_no_steps(t: TraceFrames) -> None:
    assert t.steps.empty and list(t.steps.columns) == COLUMNS["steps"]
    assert (t.kernels["step"] == -1).all() and (t.ops["step"] == -1).all()


def expect_alexnet(t: TraceFrames) -> None:
    expect_no_steps(t)
    assert t.meta["has_gpu"] and t.meta["trace_span_us"] > 40e6  # 43 s wall span


def expect_gpu_user_annotation(t: TraceFrames) -> None:
    expect_no_steps(t)
    assert set(t.annotations["cat"]) == {"user_annotation", "gpu_user_annotation"}


def expect_amd(t: TraceFrames) -> None:
    assert t.steps["index"].tolist() == [1, 2]
    assert t.runtime["name"].str.startswith("hip").any()
    assert len(t.kernels) == 14 and t.kernels["correlation"].notna().all()
    assert (t.memcpy["kind"] == "HtoD").all()


def expect_mi300_resnet(t: TraceFrames) -> None:
    assert t.steps["index"].tolist() == [15, 16, 17]
    assert len(t.python) > 10_000
    assert (t.runtime["name"] == "hipLaunchKernel").any()
    assert _share(t.steps, "gpu_busy_us") > 0.85
    # conv FLOPs from "Concrete Inputs": conv1 7x7/2 on [10,3,224,224] -> 112x112 output
    conv1 = t.ops[(t.ops["name"] == "aten::conv2d")
                  & t.ops["input_dims"].map(lambda d: bool(d) and d[0] == [10, 3, 224, 224])]
    assert len(conv1) > 0
    assert conv1["flops"].iloc[0] == 2 * 10 * 112 * 112 * 64 * 3 * 7 * 7


def expect_trace_filter(rank: int):
    def check(t: TraceFrames) -> None:
        assert t.meta["rank"] == rank and t.meta["world_size"] == 128
        assert len(t.steps) == 2 and t.meta["device_properties"] == []
        assert 0.30 < _share(t.steps, "gpu_busy_us") < 0.65
    return check


def expect_df_index_resolver(t: TraceFrames) -> None:
    assert len(t.steps) == 5 and len(t.memory) > 10_000
    assert t.meta["n_events"] == 216_092
    assert 0.45 < _share(t.steps, "gpu_busy_us") < 0.75


def expect_low_utilisation(t: TraceFrames) -> None:
    assert _share(t.steps, "gpu_busy_us") < 0.45
    assert _share(t.steps, "data_wait_us") < 0.05


def expect_trace_diff(t: TraceFrames) -> None:
    assert len(t.steps) == 6 and t.steps["index"].iloc[0] == 1009
    assert _share(t.steps, "data_wait_us") < 0.02
    assert _share(t.steps, "gpu_busy_us") > 0.75


def expect_bert_h100(t: TraceFrames) -> None:
    assert len(t.steps) == 1 and len(t.python) > 0
    assert t.memory["total_allocated"].notna().all() and (t.memory["device_type"] == 1).any()
    assert t.runtime["name"].isin(["cuLaunchKernel"]).any()  # cuda_driver events


def expect_inference_step(device: str):
    def check(t: TraceFrames) -> None:
        assert len(t.steps) == 1 and t.meta["has_gpu"]
        assert t.meta["device_properties"][0]["name"].startswith(device)
        assert not t.annotations["name"].str.startswith("Optimizer.step").any()
    return check


EXPECT = {
    "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz": expect_resnet_nw0_first,
    "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz": expect_resnet_nw0_second,
    "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz": expect_resnet_nw4,
    "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz": expect_resnet_nw4,
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": expect_ns_resolution,
    "ml-accelerator-profiling-labs/fp32.pt.trace.json": expect_ml_fp32,
    "ml-accelerator-profiling-labs/amp.pt.trace.json": expect_ml_amp,
    "deepseek-profile-data/train.json": expect_deepseek,
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": expect_cpu_only,
    "hta/history/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": expect_cpu_only_history,
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": expect_no_distributed_info,
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": expect_alexnet,
    "hta/history/with_gpu_user_annotation/step_based_trace_2543932.json.gz": expect_gpu_user_annotation,
    "tracelens/torch_compile_triton/trace.json.gz": expect_no_steps,
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": expect_amd,
    "tracelens/mi300/resnet_act_checkpoint.json.gz": expect_mi300_resnet,
    "hta/trace_filter/sampled_rank-0.json.gz": expect_trace_filter(0),
    "hta/trace_filter/sampled_rank-1.json.gz": expect_trace_filter(1),
    "hta/df_index_resolver/df_index_resolver.json.gz": expect_df_index_resolver,
    "hta/nccl_parser_config/nccl_data.json.gz": expect_low_utilisation,
    "hta/negative_queue_length_values_check/rank0.json.gz": expect_low_utilisation,
    "hta/trace_diff/control/control.json.gz": expect_trace_diff,
    "hta/trace_diff/test/test.json.gz": expect_trace_diff,
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz": expect_bert_h100,
    "tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz": expect_inference_step("AMD Instinct MI300X"),
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": expect_inference_step("NVIDIA H100"),
}


# ----------------------------------------------------------------------------
# Generic invariants, checked on every trace.


def check_invariants(t: TraceFrames, path: str) -> None:
    for frame, cols in COLUMNS.items():
        df = getattr(t, frame)
        assert isinstance(df, pd.DataFrame), frame
        assert list(df.columns) == cols, frame
        if "dur_us" in cols and len(df):
            assert (df["dur_us"] >= 0).all(), frame
            assert np.allclose(df["end_us"], df["ts_us"] + df["dur_us"], rtol=0, atol=1e-3), frame
            assert df["ts_us"].is_monotonic_increasing, frame
        if "step" in cols:
            assert df["step"].dtype == np.int64, frame
    assert set(t.meta) == META_KEYS
    assert t.meta["source"] == path and t.meta["n_events"] > 0
    assert t.meta["has_gpu"] == bool(len(t.kernels) or len(t.memcpy))
    assert t.meta["trace_span_us"] >= 0

    ops = t.ops
    assert ops["depth"].min() >= 0 if len(ops) else True
    assert ((ops["self_us"] >= 0) & (ops["self_us"] <= ops["dur_us"] + 1e-6)).all()
    assert ops["external_id"].dtype == "Int64" and ops["flops"].dtype == np.float64
    assert (ops["flops"].dropna() >= 0).all()
    # self times on a thread add up to the top-level time (ranges nest properly)
    for _, g in ops.groupby(["pid", "tid"]):
        top = g.loc[g["depth"] == 0, "dur_us"].sum()
        assert math.isclose(g["self_us"].sum(), top, rel_tol=0.01, abs_tol=1.0)

    assert set(t.memcpy["kind"]) <= MEMCPY_KINDS
    assert set(t.memcpy["src"]) <= MEM_SIDES and set(t.memcpy["dst"]) <= MEM_SIDES
    assert (t.memcpy.loc[t.memcpy["kind"] == "Memset", "src"] == "").all()
    for frame in ("kernels", "memcpy", "runtime"):
        assert getattr(t, frame)["correlation"].dtype == "Int64"

    s = t.steps
    if len(s):
        assert s["index"].is_monotonic_increasing and s["index"].is_unique
        assert (s["end_us"] == s["ts_us"] + s["dur_us"]).all()
        assert (s["dur_us"] > 0).all()
        for col in ("data_wait_us", "optimizer_us", "gpu_busy_us"):
            assert ((s[col] >= 0) & (s[col] <= s["dur_us"] + 1e-6)).all(), col
        assert (s["kernel_us"] >= 0).all() and (s["n_kernels"] >= 0).all()
        assert s["n_kernels"].sum() == (t.kernels["step"].isin(s["index"])).sum()
        cpu_steps = t.annotations[(t.annotations["cat"] == "user_annotation")
                                  & t.annotations["name"].str.startswith("ProfilerStep#")]
        assert len(s) == cpu_steps["name"].nunique()
        if not t.meta["has_gpu"]:
            assert (s["gpu_busy_us"] == 0).all()
            assert s["device_data_wait_us"].isna().all() and s["device_optimizer_us"].isna().all()
        else:  # the device's parts are disjoint pieces of its span
            parts = s["device_data_wait_us"] + s["device_optimizer_us"].fillna(0.0)
            assert (s["device_data_wait_us"] >= 0).all() and (s["device_optimizer_us"].dropna() >= 0).all()
            assert (parts <= s["device_dur_us"] + 1e-6).all()


# Every trace found, plus those EXPECT names (they skip loudly when the shared folder is missing).
TRACE_FILES = sorted(set(known_traces()) | set(EXPECT))


@pytest.mark.parametrize("rel", TRACE_FILES)
def test_real_trace(rel):
    path = str(trace_path(rel))
    t = load_trace(path)
    assert isinstance(t, TraceFrames)
    check_invariants(t, path)
    # The impossible-times guard's limit (a day) sits far above any real trace: nothing is skipped.
    assert t.meta["skipped_events"] == 0 and t.meta["warnings"] == []
    check = EXPECT.get(rel)
    if check is not None:
        check(t)


def test_every_expectation_has_a_file():
    # A shared trace without an EXPECT entry would vanish from TRACE_FILES, not skip, without the folder.
    unlisted = set(known_traces()) - set(EXPECT) - {p.relative_to(SHIPPED_TRACES).as_posix()
                                                    for p in SHIPPED_TRACES.glob("**/*.json*")}
    assert not unlisted, f"give these shared traces an EXPECT entry: {sorted(unlisted)}"
    for rel in EXPECT:
        trace_path(rel)  # fails when the shared folder is there without it


def test_shipped_traces_are_licensed_and_intact():
    """tests/data/traces holds only licensed folders, each file listed in its README and SHA256SUMS."""
    shipped = sorted(p.relative_to(SHIPPED_TRACES).as_posix() for p in SHIPPED_TRACES.glob("**/*.json*"))
    assert shipped, f"no traces shipped in {SHIPPED_TRACES}"
    lines = (SHIPPED_TRACES / "SHA256SUMS").read_text().splitlines()
    sums = {name: digest for digest, name in (line.split(maxsplit=1) for line in lines)}
    assert sorted(sums) == shipped
    readme = (SHIPPED_TRACES / "README.md").read_text()
    licensed = {"kineto", "hta", "tracelens"}  # BSD-3-Clause / MIT; the other shared folders have no licence
    for rel in shipped:
        folder = rel.split("/")[0]
        assert folder in licensed and (SHIPPED_TRACES / folder / "LICENSE").is_file(), rel
        assert f"`{rel}`" in readme, f"{rel} is not listed in tests/data/traces/README.md"
        digest = hashlib.sha256((SHIPPED_TRACES / rel).read_bytes()).hexdigest()
        assert digest == sums[rel], f"{rel} does not match SHA256SUMS"
        shared = SHARED_TRACES / rel
        if shared.is_file():
            assert hashlib.sha256(shared.read_bytes()).hexdigest() == digest, f"{rel} differs from {shared}"


# ----------------------------------------------------------------------------
# A trace recorded here with torch.profiler (CPU, new layout, known shapes).

BATCH, D_IN, D_HID, D_OUT, N_BATCHES = 8, 32, 16, 4, 6


@pytest.fixture(scope="module")
def own_trace(tmp_path_factory) -> TraceFrames:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(), torch.nn.Linear(D_HID, D_OUT))
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * N_BATCHES, D_IN),
                                          torch.randint(0, D_OUT, (BATCH * N_BATCHES,)))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=lambda step: ProfilerAction.RECORD) as prof:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    out = tmp_path_factory.mktemp("own_trace") / "trace.json"
    prof.export_chrome_trace(str(out))
    return load_trace(out)


def test_own_trace_steps(own_trace):
    t = own_trace
    check_invariants(t, t.meta["source"])
    s = t.steps
    # one step per batch, plus the trailing one that only sees StopIteration
    assert len(s) >= N_BATCHES
    assert s["index"].tolist() == list(range(len(s)))
    full = s.iloc[:N_BATCHES]
    assert (full["data_wait_us"] > 0).all() and (full["optimizer_us"] > 0).all()
    assert (full["data_wait_us"] + full["optimizer_us"] < full["dur_us"]).all()
    assert t.meta["has_gpu"] is False and (s["gpu_busy_us"] == 0).all()
    assert t.meta["device_properties"] == [] and t.meta["display_time_unit"] == "ms"
    names = set(t.annotations["name"])
    assert any(n.startswith("enumerate(DataLoader)") for n in names)
    assert any(n.startswith("Optimizer.step#SGD.step") for n in names)
    assert (t.ops.loc[t.ops["step"] >= 0, "step"].isin(s["index"])).all()


def test_own_trace_flops(own_trace):
    ops = own_trace.ops
    addmm = ops[ops["name"] == "aten::addmm"]
    assert len(addmm) == 2 * N_BATCHES
    for dims, flops in zip(addmm["input_dims"], addmm["flops"]):
        (m, k), (k2, n) = dims[1], dims[2]
        assert k == k2 and flops == 2 * m * n * k
    assert set(addmm["flops"]) == {2 * BATCH * D_IN * D_HID, 2 * BATCH * D_HID * D_OUT}
    # backward GEMMs are plain aten::mm with their own FLOPs
    mm = ops[ops["name"] == "aten::mm"]
    assert len(mm) > 0 and (mm["flops"] > 0).all()
    # aten::linear decomposes into addmm: no FLOPs of its own (no double count)
    assert ops.loc[ops["name"] == "aten::linear", "flops"].isna().all()
    assert list(addmm["input_types"].iloc[0][:3]) == ["float", "float", "float"]


# ----------------------------------------------------------------------------
# Errors and helpers


def _one_line_error(path) -> str:
    with pytest.raises(TraceError) as exc:
        load_trace(path)
    msg = str(exc.value)
    assert msg and "\n" not in msg
    return msg


def test_missing_file(tmp_path):
    msg = _one_line_error(tmp_path / "nope.json")
    assert "not found" in msg and "nope.json" in msg


def test_garbage_file(tmp_path):
    p = tmp_path / "garbage.json"
    p.write_bytes(b"this is not json {\n at all\n")
    assert "JSON" in _one_line_error(p)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    _one_line_error(empty)


def test_truncated_gzip(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1,
                            "ts": i * 10.0, "dur": 5.0} for i in range(2000)]}
    blob = gzip.compress(json.dumps(doc).encode())
    ok = tmp_path / "ok.json.gz"
    ok.write_bytes(blob)
    assert len(load_trace(ok).ops) == 2000
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(blob[: len(blob) // 2])
    assert "gzip" in _one_line_error(bad)


def test_json_without_trace_events(tmp_path):
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"schemaVersion": 1, "events": []}))
    assert "traceEvents" in _one_line_error(p)
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2, 3]")
    _one_line_error(lst)


def test_a_trace_with_no_usable_event_is_refused(tmp_path):
    """An empty events list, or one of non-events, is unusable input, not a run with no bottleneck
    (the frames' shape when empty is TraceFrames.empty's, below)."""
    p = tmp_path / "min.json"
    p.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(TraceError, match="no usable events: it has none"):
        load_trace(p)
    p.write_text(json.dumps({"traceEvents": [1, "x", None]}))
    with pytest.raises(TraceError, match="no usable events: none of its 3 events"):
        load_trace(p)


def test_empty_trace_frames():
    t = TraceFrames.empty()
    for frame, cols in COLUMNS.items():
        assert list(getattr(t, frame).columns) == cols and getattr(t, frame).empty
    assert set(t.meta) == META_KEYS and t.meta["has_gpu"] is False
    assert t.steps["index"].dtype == np.int64 and t.ops["external_id"].dtype == "Int64"


def test_interval_union():
    assert interval_union_us([], []) == 0.0
    assert interval_union_us([0, 5, 20], [10, 15, 25]) == 20.0
    assert interval_union_us(np.array([3.0, 0.0, 1.0]), np.array([4.0, 10.0, 2.0])) == 10.0
    assert interval_union_us([0, 10], [10, 20]) == 20.0


def test_hand_made_trace_semantics(tmp_path):
    """Exact numbers on a small mixed-layout trace with the awkward cases in it."""
    dl = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

    def x(cat, name, ts, dur, args=None, pid=1, tid=1):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": args or {}}

    gpu = {"device": 0, "stream": 7}
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        42, "not an event",
        x("user_annotation", "ProfilerStep#3", 0, 100),
        x("user_annotation", "ProfilerStep#3", 0, 50),  # duplicate N: the longer one wins
        x("user_annotation", "ProfilerStep#4", 100, 100),
        x("gpu_user_annotation", "ProfilerStep#3", 10, 300, pid=0, tid=7),  # not a step
        x("user_annotation", dl, 0, 30),
        x("user_annotation", dl, 100, 20),
        x("Operator", dl, 110, 20, tid="1"),  # old layout: moved to annotations
        x("Operator", "Optimizer.step#SGD.step", 150, 40, tid="1"),
        x("cpu_op", "aten::linear", 40, 20, tid="1"),
        x("cpu_op", "aten::addmm", 42, 15, {"Input Dims": [[4], [2, 3], [3, 4], [], []], "External id": 5}),
        {"ph": "X", "cat": "cpu_op", "name": "aten::broken", "pid": 1, "tid": 1, "ts": 70},  # no dur
        x("cuda_runtime", "cudaLaunchKernel", 90, 5, {"correlation": 11}),
        x("cuda_runtime", "cudaMemcpyAsync", 150, 5, {"correlation": 12}),
        x("kernel", "late_kernel", 120, 10, {**gpu, "correlation": 11, "grid": [1, 1, 1]}, pid=0, tid=7),
        x("kernel", "orphan_kernel", 50, 10, {**gpu, "correlation": 99}, pid=0, tid=7),
        x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 195, 10, {**gpu, "correlation": 12, "bytes": 1024},
          pid=0, tid=7),
        x("gpu_memset", "Memset (Device)", 55, 10, {**gpu, "correlation": 13}, pid=0, tid=7),
        x("Memcpy", "Memcpy HtoD (Host -> Device)", 400, 1, {"correlation": 14}, pid=0, tid="stream 9"),
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 45,
         "args": {"Device Type": 0, "Device Id": -1, "Bytes": 16}},
        x("python_function", "train.py(10): step", 0, 250),
    ]
    p = tmp_path / "hand.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                             "distributedInfo": {"rank": 2, "world_size": 4}}))
    t = load_trace(p)
    check_invariants(t, str(p))

    s = t.steps.set_index("index")
    assert s.index.tolist() == [3, 4]
    assert s.loc[3, "dur_us"] == 100
    assert s.loc[3, "data_wait_us"] == 30 and s.loc[4, "data_wait_us"] == 30
    assert s.loc[3, "optimizer_us"] == 0 and s.loc[4, "optimizer_us"] == 40
    assert s.loc[3, "gpu_busy_us"] == 15 and s.loc[4, "gpu_busy_us"] == 15
    assert s.loc[3, "kernel_us"] == 20 and s.loc[3, "n_kernels"] == 2 and s.loc[4, "n_kernels"] == 0
    # re-anchored to the device: step 3 ends with its late kernel (130), step 4 with its copy (205)
    assert s.loc[3, "device_dur_us"] == 130 and s.loc[4, "device_dur_us"] == 205 - 130

    k = t.kernels.set_index("name")
    assert k.loc["late_kernel", "step"] == 3  # launched in step 3, ran in step 4's window
    assert k.loc["orphan_kernel", "step"] == 3  # no launch event: by time
    assert k.loc["late_kernel", "grid"] == [1, 1, 1] and math.isnan(k.loc["late_kernel", "registers_per_thread"])

    m = t.memcpy.set_index("name")
    assert m.loc["Memcpy HtoD (Pinned -> Device)", ["kind", "src", "dst", "step"]].tolist() == \
        ["HtoD", "Pinned", "Device", 4]
    assert m.loc["Memcpy HtoD (Pinned -> Device)", "bytes"] == 1024
    assert m.loc["Memset (Device)", ["kind", "src", "dst"]].tolist() == ["Memset", "", "Device"]
    assert m.loc["Memcpy HtoD (Host -> Device)", ["kind", "src", "stream", "step"]].tolist() == ["HtoD", "", 9, -1]

    ops = t.ops.set_index("name")
    assert "aten::broken" not in ops.index and "Optimizer.step#SGD.step" not in ops.index
    assert ops.loc["aten::linear", "self_us"] == 5 and ops.loc["aten::addmm", "depth"] == 1
    assert ops.loc["aten::addmm", "flops"] == 2 * 2 * 3 * 4 and ops.loc["aten::addmm", "external_id"] == 5
    assert ops.loc["aten::linear", "tid"] == 1 and pd.isna(ops.loc["aten::linear", "external_id"])

    ann = t.annotations
    assert (ann.loc[ann["name"] == "Optimizer.step#SGD.step", "cat"] == "user_annotation").all()
    assert ann.loc[ann["cat"] == "gpu_user_annotation", "step"].tolist() == [3]
    assert t.memory["bytes"].tolist() == [16.0] and t.memory["device_id"].tolist() == [-1]
    assert len(t.python) == 1 and t.python["step"].iloc[0] == 3
    assert t.meta["rank"] == 2 and t.meta["world_size"] == 4 and t.meta["has_gpu"] is True
    assert t.meta["trace_span_us"] == 401


def test_impossible_times_are_skipped_and_said(tmp_path):
    """Negative, NaN/infinite, day-long and far-off events are dropped and counted; the rest is intact."""
    def x(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    good = [x("user_annotation", f"ProfilerStep#{i}", i * 1000, 900) for i in range(4)]
    good += [x("cpu_op", "aten::mm", i * 1000 + 100, 500) for i in range(4)]
    bad = [x("cpu_op", "aten::add", 1200, -50), x("user_annotation", "ProfilerStep#9", 9000, -5),
           x("cpu_op", "aten::sub", 1300, 1e18), x("kernel", "k", 1400, float("inf")),
           x("cpu_op", "aten::mul", 1e18, 10), x("cpu_op", "aten::div", float("nan"), 10)]
    p = tmp_path / "absurd.json"
    bad.append(x("cpu_op", "aten::null_dur", 5, None))
    p.write_text(json.dumps({"traceEvents": good + bad}))
    t = load_trace(p)
    check_invariants(t, str(p))
    assert t.meta["skipped_events"] == 7
    assert t.meta["warnings"] == ["skipped 7 trace events with negative or absurd times (3 with a null, NaN or "
                                  "infinite time, 2 with a negative duration, 1 lasting over a day, 1 starting over "
                                  "a day away from the rest)"]
    assert t.steps["index"].tolist() == [0, 1, 2, 3] and t.ops["name"].tolist() == ["aten::mm"] * 4
    assert t.kernels.empty and t.meta["trace_span_us"] == 3900

    nothing = tmp_path / "nothing.json"
    nothing.write_text(json.dumps({"traceEvents": bad}))
    with pytest.raises(TraceError, match="no usable events: all 7 timed events have negative or absurd times"):
        load_trace(nothing)


@pytest.mark.parametrize("rel", ["kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                                 "hta/nccl_parser_config/nccl_data.json.gz"])
def test_nesting_in_array_operations_equals_the_stack_on_real_traces(rel):
    """Self time, depth and FLOP cover from the array version are the stack's, to the bit."""
    from advisor.trace.read import read_file

    _, cols, _ = read_file(str(trace_path(rel)))
    c = cols["ops"]
    keep = c["ok"] & np.isfinite(c["ts"]) & np.isfinite(c["dur"])
    ts, dur = c["ts"][keep], c["dur"][keep]
    order = np.lexsort((-dur, ts))
    ts, dur = ts[order], dur[order]
    thr = nesting.thread_codes(c["pid"][keep][order], c["tid"][keep][order])
    flops = ~np.isnan(c["flops"][keep][order])
    fast = nesting._nesting_nested(ts, dur, ts + dur, thr, flops)
    slow = nesting._nesting_stack(ts, dur, ts + dur, thr, flops)
    assert fast is not None
    for a, b in zip(fast, slow):
        assert (a is None and b is None) or np.array_equal(a, b)


def test_nesting_with_zero_length_ops_and_a_partial_overlap():
    """Zero-length ops at a parent's start nest like the stack nests them; an op that outlives its
    parent sends the whole trace to the stack (None from the array version)."""
    ts = np.array([0.0, 0.0, 0.0, 1.0, 5.0, 5.0])
    dur = np.array([10.0, 4.0, 0.0, 2.0, 0.0, 1.0])
    order = np.lexsort((-dur, ts))
    ts, dur = ts[order], dur[order]
    thr, flops = np.zeros(6, dtype=np.int64), np.array([True, False, False, False, False, False])
    fast = nesting._nesting_nested(ts, dur, ts + dur, thr, flops)
    slow = nesting._nesting_stack(ts, dur, ts + dur, thr, flops)
    assert fast is not None and all(np.array_equal(a, b) for a, b in zip(fast, slow))
    overlap = np.array([0.0, 5.0]), np.array([10.0, 10.0])  # [0, 10) then [5, 15): not nested
    assert nesting._nesting_nested(overlap[0], overlap[1], overlap[0] + overlap[1], np.zeros(2, dtype=np.int64),
                                 np.zeros(2, dtype=bool)) is None
