"""`advise analyze` of a folder of many ranks' traces: each rank is reduced to its per-rank summary
as it is read (the summary a launched job's ranks send rank 0), so only the lowest rank keeps its
frames; the job's figures are those of every rank's frames held at once."""

from __future__ import annotations

import gzip
import json
import weakref

import pytest

from advisor.commands import analyze
from advisor.analysis import temporal
from advisor.engine import run_rules
from advisor.model import split_screened
from advisor.profile import Profile
from advisor.trace import ReadAhead, trace_files
from conftest import trace_path

PAIR = [f"hta/trace_filter/sampled_rank-{r}.json.gz" for r in (0, 1)]  # two ranks of a real NCCL job


@pytest.fixture
def job(tmp_path):
    """Five ranks: the real pair, and copies of it as ranks 2..4; the file read first is rank 3."""
    folder = tmp_path / "job"
    folder.mkdir()
    docs = [json.loads(gzip.decompress(trace_path(p).read_bytes())) for p in PAIR]
    for rank, name in ((3, "a"), (0, "b"), (1, "c"), (4, "d"), (2, "e")):
        doc = docs[rank % 2]
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank}
        (folder / f"{name}_rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return folder


def _whole(folder):
    """The job as every rank's frames held at once: the figures the summaries must give."""
    profiles = sorted((Profile.from_trace(p) for p in trace_files([folder])), key=lambda p: p.env.rank)
    primary = profiles[0]
    primary.ranks = profiles
    return primary, profiles


def test_the_job_figures_come_from_summaries_and_equal_those_of_every_ranks_frames(job, tmp_path, monkeypatch):
    alive: list = []
    frames = ReadAhead.frames

    def kept(self, path):  # every trace's frames, watched
        out = frames(self, path)
        alive.append(weakref.ref(out))
        return out

    seen = {}
    diagnose = analyze.diagnose

    def rules(profile, settings):  # while the rules run: which frames are still alive
        seen["alive"] = sum(ref() is not None for ref in alive)
        seen["ranks"] = [(p.env.rank, p.trace is not None) for p in profile.ranks]
        return diagnose(profile, settings)

    monkeypatch.setattr(ReadAhead, "frames", kept)
    monkeypatch.setattr(analyze, "diagnose", rules)
    assert analyze.analyze([job], ReadAhead(), as_json=True, out=tmp_path / "out", quiet=True) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())

    assert len(alive) == 5 and seen["alive"] == 1  # five traces read, the lowest rank's frames alone kept
    assert seen["ranks"] == [(0, True), (1, False), (2, False), (3, False), (4, False)]

    primary, profiles = _whole(job)
    per_rank = primary.job.per_rank()
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3, 4]
    for row, want in zip(report["ranks"], per_rank.to_dict("records")):
        for key in ("duration_s", "comm_s", "exposed_comm_s", "compute_s", "busy_s", "flops"):
            assert row[key] == pytest.approx(want[key], rel=1e-12), (row["rank"], key)
    assert report["ranks"][3]["trace"].endswith("a_rank3.json.gz")
    assert report["hta_breakdown"] == json.loads(json.dumps(temporal.for_ranks([p.trace for p in profiles])))
    findings = split_screened(run_rules(primary, None)[0])[0]
    assert sorted(f["code"] for f in report["findings"]) == sorted(f.code for f in findings)
    par = {f.code: f.evidence for f in findings if f.code.startswith("PAR")}
    assert par, "the pair's exposed communication (PAR002) is a cross-rank finding to compare"
    for f in report["findings"]:
        if f["code"] in par:
            want = json.loads(json.dumps(par[f["code"]]))
            assert {k: f["evidence"][k] for k in want} == want, f["code"]


def test_two_traces_of_one_rank_are_one_line(job, tmp_path):
    (job / "z_again.json.gz").write_bytes((job / "b_rank0.json.gz").read_bytes())
    with pytest.raises(SystemExit) as exit_:
        analyze.analyze([job], ReadAhead(), as_json=True, out=tmp_path / "out", quiet=True)
    assert exit_.value.code == 2
