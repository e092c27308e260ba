"""The installed wheel's `caprl` command, and caprl.runlog on a run that command wrote."""

import json
import math

import numpy as np
import pytest

import caprl
from caprl import runlog
from caprl.score import CiderD, DocFreq
from conftest import run_cli


def test_the_installed_command_runs_and_matches_the_module(caprl_cli):
    out = run_cli(caprl_cli, "--version")
    assert out.stdout.split() == ["caprl", caprl.__version__]


@pytest.fixture(scope="module")
def data_set(caprl_cli, tmp_path_factory):
    data = tmp_path_factory.mktemp("synth") / "data"
    run_cli(caprl_cli, "data", "synth", "--train", "64", "--val", "16", "--test", "16", "-q",
            "--out", str(data))
    return data


@pytest.fixture(scope="module")
def run_dir(caprl_cli, data_set, tmp_path_factory):
    """A real two-phase run: one XE epoch, then SCST, a small model."""
    run = tmp_path_factory.mktemp("runs") / "run"
    sets = [f'data.dir="{data_set}"', f'run_dir="{run}"', "model.hidden=32", "model.embed=32",
            "train.batch_size=16", "train.xe_epochs=1", "train.rl_epochs=1",
            "train.eval_images=8", "runtime.images_per_task=4", "checkpoint.every_steps=1000"]
    args = ["train", "--objective", "scst", "-q"]
    for s in sets:
        args += ["--set", s]
    run_cli(caprl_cli, *args)
    return run


def test_read_gives_the_steps_and_evals_as_data_frames(run_dir):
    pd = pytest.importorskip("pandas")
    run = runlog.read(run_dir)
    assert isinstance(run.steps, pd.DataFrame) and isinstance(run.evals, pd.DataFrame)
    assert list(run.steps["step"]) == list(range(1, len(run.steps) + 1))
    assert set(run.steps["phase"]) == {"xe", "rl"}
    rl = run.steps[run.steps["phase"] == "rl"]
    assert len(rl) > 0 and rl["rewards.cider"].notna().all() and (rl["rewards.cider"] >= 0).all()
    assert run.steps["losses.total"].notna().all()
    assert len(run.evals) >= 1 and (run.evals["metrics.cider_d"] >= 0).all()
    assert run.config["train"]["objective"] == "scst"
    assert run.warnings == []


def test_read_without_pandas_gives_lists_of_dicts(run_dir):
    run = runlog.read(run_dir / "run.jsonl", as_frame=False)
    assert isinstance(run.steps, list) and isinstance(run.steps[0], dict)
    assert {"step", "phase", "losses", "rewards"} <= run.steps[0].keys()
    assert isinstance(run.evals[0]["metrics"], dict)


def copy_log(run_dir, tmp_path, edit):
    lines = (run_dir / "run.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "run.jsonl"
    path.write_text("".join(edit(lines)))
    return path


def test_a_torn_last_line_is_left_out_with_a_warning(run_dir, tmp_path):
    whole = runlog.read(run_dir, as_frame=False)
    path = copy_log(run_dir, tmp_path, lambda ls: ls + ['{"type":"step","step":99,"los'])
    with pytest.warns(UserWarning, match=r"run\.jsonl:\d+: ignoring a truncated last line"):
        torn = runlog.read(path, as_frame=False)
    assert [s["step"] for s in torn.steps] == [s["step"] for s in whole.steps]


def test_damage_before_the_end_names_the_line(run_dir, tmp_path):
    path = copy_log(run_dir, tmp_path, lambda ls: ls[:2] + ["{not json\n"] + ls[2:])
    with pytest.raises(runlog.RunLogError, match=r"run\.jsonl:3: not a JSON object"):
        runlog.read(path)
    headless = copy_log(run_dir, tmp_path, lambda ls: ls[1:])
    with pytest.raises(runlog.RunLogError, match=r"run\.jsonl:1: the first line is not the run log's header"):
        runlog.read(headless)
    with pytest.raises(runlog.RunLogError, match=r"no run log here"):
        runlog.read(tmp_path / "nowhere")


def test_a_resumed_runs_repeated_steps_replace_the_earlier_ones_and_null_is_nan(run_dir, tmp_path):
    def resume_at_step_2(lines):
        steps = [l for l in lines if '"type":"step"' in l]
        again = json.loads(steps[1])
        again["step"], again["losses"] = 2, {"total": None}
        return lines + [json.dumps({"type": "step", **{k: v for k, v in again.items() if k != "type"}}) + "\n"]

    run = runlog.read(copy_log(run_dir, tmp_path, resume_at_step_2), as_frame=False)
    assert [s["step"] for s in run.steps] == [1, 2]
    assert math.isnan(run.steps[-1]["losses"]["total"])


def test_a_df_file_from_caprl_data_df_scores_as_a_table(caprl_cli, data_set, tmp_path):
    out = tmp_path / "train-df.bin"
    run_cli(caprl_cli, "data", "df", str(data_set), "--out", str(out))
    table = DocFreq.load(str(out))
    assert table.num_images == 64 and len(table) > 0
    gts = {0: ["red square left of blue circle", "a red square beside a blue circle"]}
    res = [{"image_id": 0, "caption": ["red square left of blue circle"]}]
    score, scores = CiderD(df=str(out)).compute_score(gts, res)
    assert scores.shape == (1,) and np.isfinite(score) and score > 0
    corrupt = tmp_path / "corrupt.bin"
    corrupt.write_bytes(out.read_bytes()[:-7])
    with pytest.raises(ValueError, match=r"corrupt\.bin: checksum mismatch|corrupt\.bin: expected"):
        CiderD(df=str(corrupt))
