"""dataset build / list / show / export against a real DuckDB warehouse holding the marts."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from babylon_rl import warehouse
from babylon_rl.dataset import store
from babylon_rl.dataset.build import OUTPUT_COLUMNS, build
from babylon_rl.dataset.params import BuildParams
from babylon_rl.dataset.sampling import dropout_rate, eval_window_count, plan
from babylon_rl.settings import Home
from tests import factories as f

# 20 hourly windows of mixed sizes: 3-agent windows are never usable with min_agents=5.
SIZES = [3, 5, 6, 8, 10, 12, 4, 9, 5, 7, 11, 6, 5, 8, 3, 10, 6, 7, 5, 9]


def make_warehouse(home: Path, specs: list[f.WindowSpec], with_meta: bool = True) -> pl.DataFrame:
    samples = f.sample_rows(specs)
    conn = warehouse.connect(Home.resolve(home))
    try:
        f.create_marts(conn, samples, with_meta=with_meta)
    finally:
        conn.close()
    return samples


@pytest.fixture
def mixed(home: Path) -> pl.DataFrame:
    return make_warehouse(home, f.hourly(len(SIZES), SIZES))


def load(home: Path, name: str) -> tuple[dict, pl.DataFrame, pl.DataFrame]:
    """The manifest, the windows before the held-out ones (train, then validation) and the eval split."""
    base = home / "datasets" / name
    return (
        json.loads((base / "manifest.json").read_text()),
        pl.concat([pl.read_parquet(base / "train.parquet"), pl.read_parquet(base / "validation.parquet")]),
        pl.read_parquet(base / "eval.parquet"),
    )


def ok(result) -> None:
    assert result.exit_code == 0, result.output


def fails(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "Error:" in result.output
    for needle in needles:
        assert needle in result.output, result.output


# -- build: invariants ----------------------------------------------------------------


def test_build_groups_split_and_columns(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "d1", "--target-trajectories", "60"))
    manifest, train, ev = load(home, "d1")
    assert train.columns == OUTPUT_COLUMNS and ev.columns == OUTPUT_COLUMNS
    both = pl.concat([train, ev])
    per_window = both.group_by("window_id").agg(agents=pl.col("agent_id").n_unique(), n=pl.len(), size=pl.col("group_size").first())
    assert per_window["agents"].min() >= 5
    assert per_window["n"].max() <= 8
    assert (per_window["n"] == per_window["size"]).all()
    assert set(ev["split"]) == {"eval"}
    windows = per_window.height
    assert ev["window_id"].n_unique() == math.ceil(0.1 * windows)
    assert manifest["counts"]["windows"] == windows
    assert manifest["counts"]["splits"]["train"]["trajectories"] + manifest["counts"]["splits"]["validation"]["trajectories"] == train.height
    assert manifest["source_snapshot_id"] == "snap-2"
    assert manifest["model_versions"] == {"babylon.training_samples": "fp-ts-1", "babylon.windows": "fp-w-1"}
    assert manifest["parameters"]["target_trajectories"] == 60 and manifest["seed"] == 0
    # Ranks and z-scores are computed inside the kept group.
    best = both.filter(pl.col("pnl_rank") == 1).group_by("window_id").agg(pl.col("pnl").max())
    top = both.group_by("window_id").agg(pl.col("pnl").max())
    assert best.sort("window_id").equals(top.sort("window_id"))


def test_windows_split_by_time_into_train_validation_and_eval(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "t", "--target-trajectories", "60", "--validation-fraction", "0.2", "--eval-fraction", "0.2"))
    base = home / "datasets" / "t"
    splits = {s: pl.read_parquet(base / f"{s}.parquet") for s in ("train", "validation", "eval")}
    manifest = json.loads((base / "manifest.json").read_text())
    assert all(frame.height for frame in splits.values())
    assert splits["train"]["window_start"].max() < splits["validation"]["window_start"].min()
    assert splits["validation"]["window_start"].max() < splits["eval"]["window_start"].min()
    for a, b in (("train", "validation"), ("train", "eval"), ("validation", "eval")):
        assert not set(splits[a]["trajectory_id"]) & set(splits[b]["trajectory_id"])
        assert not set(splits[a]["window_id"]) & set(splits[b]["window_id"])
    for split, frame in splits.items():
        assert set(frame["split"]) == {split}
        assert manifest["split_windows"][split] == sorted(frame["window_id"].unique().to_list())
        assert manifest["counts"]["splits"][split]["trajectories"] == frame.height
    assert manifest["eval_trajectory_ids"] == sorted(splits["eval"]["trajectory_id"].to_list())
    ok(run_cli("dataset", "build", "--name", "nov", "--target-trajectories", "60", "--validation-fraction", "0"))
    assert pl.read_parquet(home / "datasets" / "nov" / "validation.parquet").height == 0
    fails(run_cli("dataset", "build", "--name", "bad", "--validation-fraction", "0.6", "--eval-fraction", "0.5"),
          "--validation-fraction + --eval-fraction must be below 1")


def test_dropout_rate_follows_the_formula(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "a", "--target-trajectories", "80", "--max-dropout", "0.5"))
    manifest, train, ev = load(home, "a")
    d = manifest["dropout"]
    assert d["rate"] == pytest.approx(min(0.5, 1 - 80 / d["available"]))
    assert d["rate"] <= 0.5
    assert d["removed_by_dropout"] <= d["budget"] == math.floor(d["rate"] * d["available"] + 1e-9)
    assert train.height + ev.height == d["available"] - d["removed_by_dropout"]
    # No dropout when the target is above what is available.
    ok(run_cli("dataset", "build", "--name", "b", "--target-trajectories", "100000"))
    manifest, train, ev = load(home, "b")
    assert manifest["dropout"]["rate"] == 0 and manifest["dropout"]["removed_by_dropout"] == 0
    assert train.height + ev.height == manifest["dropout"]["available"]


def test_whole_windows_dropped_rather_than_too_small_groups(run_cli, home: Path) -> None:
    make_warehouse(home, f.hourly(10, 5))  # no surplus anywhere: only whole windows can go
    ok(run_cli("dataset", "build", "--name", "w", "--target-trajectories", "30", "--max-dropout", "0.4"))
    manifest, train, ev = load(home, "w")
    d = manifest["dropout"]
    assert d["rate"] == pytest.approx(0.4) and d["budget"] == 20
    assert d["windows_dropped"] == 4 and d["removed_by_dropout"] == 20
    both = pl.concat([train, ev])
    assert both.group_by("window_id").len()["len"].min() == 5
    assert both["window_id"].n_unique() == 6


def test_rebuild_is_byte_identical_and_seed_changes_sample(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    args = ("dataset", "build", "--target-trajectories", "60")
    ok(run_cli(*args, "--name", "one"))
    ok(run_cli(*args, "--name", "two"))
    ok(run_cli(*args, "--name", "three", "--seed", "1"))
    one, two, three = (load(home, n)[0] for n in ("one", "two", "three"))
    assert one["content_hash"] == two["content_hash"]
    for split in ("train", "eval"):
        a = (home / "datasets/one" / f"{split}.parquet").read_bytes()
        assert a == (home / "datasets/two" / f"{split}.parquet").read_bytes()
    assert three["content_hash"] != one["content_hash"]
    _, t1, _ = load(home, "one")
    _, t3, e3 = load(home, "three")
    assert set(t1["trajectory_id"]) != set(t3["trajectory_id"])
    assert pl.concat([t3, e3]).group_by("window_id").agg(pl.col("agent_id").n_unique())["agent_id"].min() >= 5


def test_no_signal_groups_are_flagged_and_counted(run_cli, home: Path) -> None:
    specs = f.hourly(6, 6)
    specs[1].pnl = [12.5] * 6
    specs[2].pnl = [0.0, 1e-9, 0.0, 0.0, 0.0, 0.0]
    make_warehouse(home, specs)
    ok(run_cli("dataset", "build", "--name", "ns", "--eval-fraction", "0"))
    manifest, train, ev = load(home, "ns")
    flagged = set(train.filter("no_signal")["window_id"])
    assert flagged == {f.window_id(specs[1].start), f.window_id(specs[2].start)}
    assert manifest["counts"]["no_signal_groups"] == 2
    assert ev.height == 0


def test_used_and_short_trajectories_excluded(run_cli, home: Path) -> None:
    specs = f.hourly(4, 7)
    specs[0].used = {0, 1}
    specs[1].actions = [2, 8, 8, 8, 8, 8, 8]
    specs[2].used = {0, 1, 2}  # 4 unused agents left: the window is not usable
    make_warehouse(home, specs)
    ok(run_cli("dataset", "build", "--name", "fresh", "--eval-fraction", "0"))
    _, train, _ = load(home, "fresh")
    w0, w1, w2 = (f.window_id(s.start) for s in specs[:3])
    assert "agent-000" not in set(train.filter(pl.col("window_id") == w0)["agent_id"])
    assert "agent-000" not in set(train.filter(pl.col("window_id") == w1)["agent_id"])
    assert w2 not in set(train["window_id"])
    ok(run_cli("dataset", "build", "--name", "all", "--eval-fraction", "0", "--include-used"))
    _, train, _ = load(home, "all")
    assert {"agent-000", "agent-001"} <= set(train.filter(pl.col("window_id") == w0)["agent_id"])
    assert w2 in set(train["window_id"])


def test_ground_truth_never_in_messages(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "gt"))
    _, train, ev = load(home, "gt")
    for frame in (train, ev):
        assert not frame["messages"].str.contains(f.GROUND_TRUTH_MARKER, literal=True).any()
    for name in ("train.parquet", "eval.parquet"):
        assert f.GROUND_TRUTH_MARKER.encode() not in (home / "datasets/gt" / name).read_bytes()


def test_contexts_hold_the_ground_truth_of_exactly_the_kept_windows(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "ctx"))
    _, train, ev = load(home, "ctx")
    contexts = pl.read_parquet(home / "datasets/ctx/contexts.parquet")
    assert set(contexts["window_id"]) == set(train["window_id"]) | set(ev["window_id"])
    assert contexts["context_text"].str.contains(f.GROUND_TRUTH_MARKER, literal=True).all()


def test_window_pinning_and_time_range(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    wanted = [f.window_id(datetime(2025, 1, 15, h)) for h in (2, 3, 5)]
    ok(run_cli("dataset", "build", "--name", "pin", "--windows", ",".join(wanted)))
    _, train, ev = load(home, "pin")
    assert set(pl.concat([train, ev])["window_id"]) == set(wanted)
    ok(run_cli("dataset", "build", "--name", "rng", "--since", "2025-01-15T10:00", "--until", "2025-01-15T13:00"))
    _, train, ev = load(home, "rng")
    assert set(pl.concat([train, ev])["window_id"]) == {f.window_id(datetime(2025, 1, 15, h)) for h in (10, 11, 12)}
    ok(run_cli("dataset", "build", "--name", "look", "--lookback-hours", "4"))
    _, train, ev = load(home, "look")  # newest window is 19:00; 16:00..19:00, 3 agents at 14:00 anyway
    assert set(pl.concat([train, ev])["window_id"]) == {f.window_id(datetime(2025, 1, 15, h)) for h in (16, 17, 18, 19)}


def test_chats_larger_than_duckdbs_memory_limit_are_fetched(run_cli, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept chats stream out of DuckDB and are put in order by Polars: at 100k, a dataset of every window ran out
    of the warehouse's 1 GB limit sorting them in DuckDB. Here 37 MB of chats (20,000) against a 48 MB limit: the join and sort in DuckDB needed over 64 MB."""
    samples = f.sample_rows(f.hourly(200, 100))
    conn = warehouse.connect(Home.resolve(home))
    try:
        f.create_marts(conn, samples)
    finally:
        conn.close()
    assert samples["messages"].str.len_bytes().sum() > 20 * 2**20
    monkeypatch.setitem(warehouse.OFFLINE_CONFIG, "memory_limit", "48MB")

    ok(run_cli("dataset", "build", "--name", "big", "--target-trajectories", "100000", "--max-group-size", "100"))
    _, before_eval, ev = load(home, "big")
    written = pl.concat([before_eval, ev]).select("trajectory_id", "messages")
    expected = samples.select("trajectory_id", "messages").join(written, on="trajectory_id", how="inner", suffix="_written")
    assert expected.height == written.height > 15_000  # every kept row found its own chat
    assert (expected["messages"] == expected["messages_written"]).all()


def test_multiple_trajectories_per_agent_keep_distinct_agents(home: Path) -> None:
    specs = f.hourly(3, 5)
    for spec in specs:
        spec.extra_trajectories = 5
    make_warehouse(home, specs)
    result = build(Home.resolve(home), BuildParams(name="dup", target_trajectories=15, eval_fraction=0))
    train = pl.read_parquet(result.path / "train.parquet")
    assert train.group_by("window_id").agg(pl.col("agent_id").n_unique())["agent_id"].min() == 5


# -- errors ---------------------------------------------------------------------------


def test_existing_dataset_needs_force(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "x"))
    before = load(home, "x")[0]
    fails(run_cli("dataset", "build", "--name", "x", "--seed", "3"), "already exists", "--force")
    assert load(home, "x")[0]["content_hash"] == before["content_hash"]
    ok(run_cli("dataset", "build", "--name", "x", "--seed", "3", "--force"))
    assert load(home, "x")[0]["seed"] == 3
    assert sorted(p.name for p in (home / "datasets").iterdir()) == [".versions", "x"]
    assert [p.resolve() for p in (home / "datasets" / ".versions").iterdir()] == [(home / "datasets" / "x").resolve()]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--target-trajectories", "0"), "--target-trajectories"),
        (("--max-dropout", "1"), "--max-dropout"),
        (("--max-dropout", "-0.1"), "--max-dropout"),
        (("--eval-fraction", "1.0"), "--eval-fraction"),
        (("--eval-fraction", "-1"), "--eval-fraction"),
        (("--max-group-size", "3"), "--max-group-size"),
    ],
)
def test_bad_options(run_cli, home: Path, mixed: pl.DataFrame, args: tuple[str, ...], needle: str) -> None:
    fails(run_cli("dataset", "build", "--name", "bad", *args), needle)
    assert not (home / "datasets" / "bad").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "x'; DROP TABLE babylon.training_samples; --", ".hidden", "", "a\\b"])
def test_hostile_names_refused(run_cli, home: Path, mixed: pl.DataFrame, name: str) -> None:
    fails(run_cli("dataset", "build", "--name", name), "invalid dataset name")
    fails(run_cli("dataset", "show", name), "invalid dataset name")
    assert not (home.parent / "x").exists()
    conn = warehouse.connect(Home.resolve(home), read_only=True)
    assert conn.execute("SELECT count(*) FROM babylon.training_samples").fetchone()[0] == mixed.height
    conn.close()


def test_hostile_window_values_are_parameters(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    fails(run_cli("dataset", "build", "--name", "h", "--windows", "x'); DROP TABLE babylon.windows; --"), "no window")
    conn = warehouse.connect(Home.resolve(home), read_only=True)
    assert conn.execute("SELECT count(*) FROM babylon.windows").fetchone()[0] == len(SIZES)
    conn.close()


def test_no_window_meets_criteria(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    fails(run_cli("dataset", "build", "--name", "n", "--min-agents", "50", "--max-group-size", "60"), "20 windows", "--min-agents 12")


def test_missing_warehouse_and_marts(run_cli, home: Path) -> None:
    fails(run_cli("dataset", "build", "--name", "n"), "cli.py build")
    conn = warehouse.connect(Home.resolve(home))
    conn.close()
    fails(run_cli("dataset", "build", "--name", "n"), "cli.py build", "babylon.training_samples")


def test_unknown_dataset_lists_existing(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "real"))
    for command in (("show", "nope"), ("export", "nope", "--format", "jsonl")):
        fails(run_cli("dataset", *command), "unknown dataset 'nope'", "real")


# -- list, show, export ---------------------------------------------------------------


def test_list_and_show(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    ok(run_cli("dataset", "build", "--name", "shown", "--target-trajectories", "60"))
    listed = run_cli("dataset", "list")
    ok(listed)
    assert "shown" in listed.output and load(home, "shown")[0]["content_hash"][:6] in listed.output
    shown = run_cli("dataset", "show", "shown")
    ok(shown)
    assert "dropout" in shown.output and "group size" in shown.output and "sample rows" in shown.output


def test_export_jsonl(run_cli, home: Path, mixed: pl.DataFrame, tmp_path: Path) -> None:
    ok(run_cli("dataset", "build", "--name", "e"))
    out = tmp_path / "e.jsonl"
    ok(run_cli("dataset", "export", "e", "--format", "jsonl", "--output", str(out)))
    _, train, ev = load(home, "e")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == train.height + ev.height
    assert set(lines[0]) == {"messages", "trajectory_id", "window_id", "split"}
    assert all(m["role"] in {"system", "user", "assistant"} for line in lines for m in line["messages"])
    assert {line["split"] for line in lines} == {"train", "validation", "eval"}


def test_export_dpo(run_cli, home: Path, tmp_path: Path) -> None:
    specs = f.hourly(8, 6)
    specs[3].pnl = [5.0] * 6  # no signal: skipped
    make_warehouse(home, specs)
    ok(run_cli("dataset", "build", "--name", "p", "--eval-fraction", "0.25", "--validation-fraction", "0"))
    out = tmp_path / "p.dpo.jsonl"
    result = run_cli("dataset", "export", "p", "--format", "dpo", "--output", str(out))
    ok(result)
    _, train, _ = load(home, "p")
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    signal_windows = train.filter(~pl.col("no_signal"))["window_id"].n_unique()
    assert signal_windows == 5 and pairs
    # Best and worst with different system prompts share no prompt: skipped and counted.
    assert f"{signal_windows - len(pairs)} pairs without a shared prompt" in result.output
    assert "1 windows without signal" in result.output
    for pair in pairs:
        assert {"prompt", "chosen", "rejected"} <= set(pair)
        assert pair["prompt"] and pair["prompt"][0]["role"] == "system"
        assert all(m["role"] != "assistant" for m in pair["prompt"])
        assert any(m["role"] == "assistant" for m in pair["chosen"])
        assert any(m["role"] == "assistant" for m in pair["rejected"])
        group = train.filter(pl.col("window_id") == pair["window_id"])
        chosen = group.filter(pl.col("trajectory_id") == pair["chosen_id"])["pnl"][0]
        rejected = group.filter(pl.col("trajectory_id") == pair["rejected_id"])["pnl"][0]
        assert chosen == group["pnl"].max() and rejected == group["pnl"].min()
        full = json.loads(group.filter(pl.col("trajectory_id") == pair["chosen_id"])["messages"][0])
        assert pair["prompt"] + pair["chosen"] == full


# -- the sampler as a property -------------------------------------------------------


def _candidates(sizes: list[int]) -> pl.DataFrame:
    start = datetime(2025, 1, 1)
    rows = [
        {"window_id": f"w{w:03d}", "window_start": start + timedelta(hours=w), "agent_id": f"a{a}",
         "trajectory_id": f"t{w}-{a}", "pnl": float((w * 7 + a * 13) % 11), "sample_key": (w * 1_000_003 + a * 7919) % 9973}
        for w, size in enumerate(sizes) for a in range(size)
    ]  # fmt: skip
    return pl.DataFrame(rows, schema_overrides={"window_start": pl.Datetime("us")})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=15), min_size=1, max_size=30),
    target=st.integers(min_value=1, max_value=300),
    max_dropout=st.floats(min_value=0, max_value=0.95),
    min_agents=st.integers(min_value=1, max_value=6),
    extra=st.integers(min_value=0, max_value=6),
    eval_fraction=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_sampler_invariants(sizes, target, max_dropout, min_agents, extra, eval_fraction) -> None:
    usable = [s for s in sizes if s >= min_agents]
    if not usable:
        return
    params = BuildParams(name="p", target_trajectories=target, max_dropout=max_dropout, min_agents=min_agents,
                         max_group_size=min_agents + extra, eval_fraction=eval_fraction)  # fmt: skip
    candidates = _candidates(usable)
    result = plan(candidates, params)
    kept = candidates.with_row_index("row").join(result.rows, on="row")
    groups = kept.group_by("window_id").agg(n=pl.len(), agents=pl.col("agent_id").n_unique())
    assert groups["n"].min() >= min_agents and groups["agents"].min() >= min_agents
    assert groups["n"].max() <= min_agents + extra
    d = result.dropout
    assert d.rate == pytest.approx(dropout_rate(d.available, target, max_dropout)) and d.rate <= max_dropout
    assert d.removed_by_dropout <= d.budget
    assert kept.height == d.available - d.removed_by_dropout
    assert result.eval_windows == eval_window_count(groups.height, eval_fraction)
    train, ev = kept.filter(pl.col("split") == "train"), kept.filter(pl.col("split") == "eval")
    assert not set(train["window_id"]) & set(ev["window_id"])
    if ev.height and train.height:
        assert ev["window_start"].min() > train["window_start"].max()


# -- damaged datasets (issue 25 item 7) ------------------------------------------------


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _edit_manifest(path: Path) -> None:
    manifest = json.loads(path.read_text())
    manifest["counts"]["trajectories"] += 1
    path.write_text(json.dumps(manifest, indent=2))


DAMAGE = {
    "truncated": ("train.parquet", _truncate, "size"),
    "bit-flipped": ("eval.parquet", _flip_a_byte, "sha256"),
    "edited manifest": ("manifest.json", _edit_manifest, "manifest_hash"),
}
READERS = [
    ("dataset", "show", "dmg"),
    ("score", "--dataset", "dmg", "--judge", "heuristic"),
    ("train", "--dataset", "dmg", "--max-steps", "1"),
    ("train", "--dataset", "dmg", "--objective", "grpo", "--max-steps", "1"),
    ("eval", "--dataset", "dmg", "--model", "none-needed"),
    ("dataset", "export", "dmg", "--format", "jsonl"),
]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_dataset_is_one_line_naming_the_file_in_every_reader(run_cli, home: Path, mixed: pl.DataFrame, damage: str) -> None:
    filename, damage_it, why = DAMAGE[damage]
    ok(run_cli("dataset", "build", "--name", "dmg", "--target-trajectories", "60", "--seed", "4"))
    ok(run_cli("dataset", "show", "dmg"))  # the verification cache is written: the damage must still be seen
    damage_it(home / "datasets" / "dmg" / filename)
    for args in READERS:
        result = run_cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, (args, result.output)
        assert f"dataset 'dmg' is damaged: {filename}" in errors[0] and why in errors[0], errors[0]
        assert "rebuild it with: python cli.py dataset build --name dmg --target-trajectories 60 --seed 4 --force" in errors[0]


def test_a_second_open_hashes_nothing_and_a_changed_file_is_hashed_again(home: Path, mixed: pl.DataFrame,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from babylon_rl.dataset import verify
    from babylon_rl.dataset.dataset import Dataset

    h = Home.resolve(home)
    build(h, BuildParams(name="c", target_trajectories=60))
    hashed: list[str] = []
    real = verify.sha256
    monkeypatch.setattr(verify, "sha256", lambda path: hashed.append(path.name) or real(path))
    Dataset.open(h, "c")
    Dataset.open(h, "c")
    assert hashed == []  # the build recorded what it hashed
    train = home / "datasets" / "c" / "train.parquet"
    train.write_bytes(train.read_bytes())  # same bytes, new mtime: hashed once, then remembered
    Dataset.open(h, "c")
    Dataset.open(h, "c")
    assert hashed == ["train.parquet"]


def test_a_dataset_from_before_the_files_map_opens_and_force_replaces_it(run_cli, home: Path, mixed: pl.DataFrame) -> None:
    from babylon_rl.dataset.dataset import Dataset

    ok(run_cli("dataset", "build", "--name", "old", "--target-trajectories", "60"))
    link = home / "datasets" / "old"
    version = link.resolve()
    link.unlink()
    version.rename(link)  # the layout before versions: the directory itself
    manifest = json.loads((link / "manifest.json").read_text())
    manifest["files"] = {split: f"{split}.parquet" for split in ("train", "validation", "eval")}  # format 1
    manifest["manifest_hash"] = store.manifest_hash(manifest)
    (link / "manifest.json").write_text(json.dumps(manifest))
    (link / "scores.parquet").write_bytes(b"old scores")
    assert Dataset.open(Home.resolve(home), "old").path == link.resolve()  # sizes and sha256 unknown: not checked
    ok(run_cli("dataset", "show", "old"))
    ok(run_cli("dataset", "build", "--name", "old", "--target-trajectories", "60", "--force"))
    assert link.is_symlink() and not (link / "scores.parquet").exists()
    assert [p.name for p in (home / "datasets" / ".versions").iterdir()] == [link.resolve().name]
