"""A run stays one run (issue 27): `--out` never takes someone else's directory, a resume refuses
an edited configuration but not a setting that only changes how the same run is computed, a
branch continues a checkpoint as a new run with new settings, a run whose config.toml was deleted
recovers it from its checkpoints, and a run whose data moved is evaluated with `--data`.
(The one-line refusals are rows of docs/reference/bad-input.md: tests/bad_input_cluster.py.)"""

from __future__ import annotations

import json
import shutil

import torch
from safetensors.torch import load_file

from fixedfirst.runs.identity import MAY_CHANGE, identity
from fixedfirst.train.optim import lr_at
from tests import test_hard_edges
from tests.bad_input_cases import snapshot
from tests.test_crash import assert_same_run
from tests.test_hard_edges import cli
from tests.trainer_helpers import (
    comparable,
    final_weights,
    tiny_config,
    train_records,
    write_tiny_config,
)

reference = test_hard_edges.reference  # the uninterrupted tiny run, a module fixture here too


def test_force_trains_beside_foreign_files_and_never_touches_them(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "shared"
    run.mkdir()
    (run / "notes.txt").write_text("mine\n")
    (run / "slurm-1.out").write_text("a scheduler's log\n")
    before = snapshot(run)
    code, _, err = cli(capsys, "train", config, "--out", run, "--quiet", "--stop-after", "4")
    assert code == 2 and "holds files fixedfirst did not write (notes.txt, slurm-1.out)" in err
    assert snapshot(run) == before
    args = ("train", config, "--out", run, "--quiet", "--stop-after", "4", "--force")
    assert cli(capsys, *args)[0] == 0
    assert (run / "notes.txt").read_text() == "mine\n"
    assert (run / "slurm-1.out").read_text() == "a scheduler's log\n"
    assert (run / "checkpoints" / "step-0000004" / "meta.json").is_file()
    code, _, err = cli(capsys, *args)  # a run is there now: --force does not start it again
    assert code == 2 and "already holds a run; pass --resume" in err


def test_identity_is_what_defines_the_run():
    keys = identity(tiny_config())
    for key in ("model.d_model", "schedule.k0", "train.seed", "train.tokens", "train.lr"):
        assert key in keys
    for key in ("train.warmup", "train.beta2", "train.grad_clip", "train.lr_schedule"):
        assert key in keys  # every optimizer setting
    assert not set(keys) & MAY_CHANGE
    assert not [k for k in keys if k.startswith(("eval.", "switch."))]
    auto = identity(tiny_config("schedule.switch=auto", "switch.rule=plateau"))
    assert "switch.rule" in auto and "train.log_every" in auto  # the losses the rule reads
    changed = identity(
        tiny_config("train.lr=1e-3", "train.threads=1", "train.check_memory=false", "eval.every=8")
    )
    assert {k for k in keys if keys[k] != changed.get(k)} == {"train.lr"}


def test_a_resume_may_change_how_the_run_is_computed(tmp_path, capsys, reference):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    assert cli(capsys, "train", config, "--out", run, "--quiet", "--stop-after", "8")[0] == 0
    how = ["train.log_every=2", "train.checkpoint_every=16", "train.threads=1", "eval.every=24"]
    sets = [a for s in how for a in ("--set", s)]
    code, _, err = cli(capsys, "train", "--resume", "--out", run, "--quiet", *sets)
    assert code == 0, err
    wa, wb = final_weights(reference), final_weights(run)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    logged = {r["step"]: r for r in train_records(reference)}
    resumed = train_records(run)
    assert [r["step"] for r in resumed][8:] == list(range(10, 49, 2))
    assert comparable(resumed) == comparable([logged[r["step"]] for r in resumed])


def test_a_run_without_config_toml_recovers_it_from_its_checkpoint(tmp_path, capsys, reference):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    assert cli(capsys, "train", config, "--out", run, "--quiet", "--stop-after", "8")[0] == 0
    original = (run / "config.toml").read_text()
    (run / "config.toml").unlink()
    code, out, err = cli(capsys, "eval", run, "--depths", "1", "--out", tmp_path / "e.json")
    assert code == 0 and "step 8:" in out
    assert err == (
        f"warning: {run}/config.toml is missing; using the configuration stored in step-0000008 "
        f"(`fixedfirst train --resume --out {run}` writes it back)\n"
    )
    code, _, err = cli(capsys, "train", "--resume", "--out", run, "--quiet")
    assert code == 0, err
    assert (run / "config.toml").read_text() == original
    assert_same_run(reference, run)


def test_a_branch_continues_the_checkpoint_with_the_new_settings(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    source, branch = tmp_path / "run", tmp_path / "lower-lr"
    assert cli(capsys, "train", config, "--out", source, "--quiet", "--stop-after", "8")[0] == 0
    before = snapshot(source)
    args = ("branch", source, "--out", branch, "--checkpoint", "4", "--set", "train.lr=1e-3")
    code, out, _ = cli(capsys, *args)
    assert code == 0
    assert "with train.lr (0.003 in the run, 0.001 now)" in out
    assert f"train it with: fixedfirst train --resume --out {branch}" in out
    code, _, err = cli(capsys, "train", "--resume", "--out", branch, "--quiet")
    assert code == 0, err
    assert snapshot(source) == before  # the source is not touched

    copied = branch / "checkpoints" / "step-0000004"
    meta = json.loads((copied / "meta.json").read_text())
    assert meta["tags"] == ["branch"] and meta["branch"]["run"] == str(source)
    original = load_file(source / "checkpoints" / "step-0000004" / "model.safetensors")
    weights = load_file(copied / "model.safetensors")
    assert all(torch.equal(original[k], weights[k]) for k in original)

    a, b = train_records(source), train_records(branch)
    assert comparable(a[:4]) == comparable(b[:4])  # the history up to the branch
    # Step 5 is computed from the same weights, batch and depth, and updates with the new lr;
    # from step 6 on the weights differ.
    assert a[4]["loss"] == b[4]["loss"] and a[4]["depth"] == b[4]["depth"]
    new = tiny_config("train.lr=1e-3").train
    assert b[4]["lr"] == lr_at(4, 48, new) != a[4]["lr"]
    assert a[5]["loss"] != b[5]["loss"]
    assert [r["step"] for r in b] == list(range(1, 49))
    code, _, err = cli(capsys, "train", "--resume", "--out", branch, "--set", "train.lr=3e-3")
    assert code == 2 and "train.lr (0.001 in the run, 0.003 now)" in err  # a run of its own


def test_moved_data_is_named_with_data(text_run, tmp_path, capsys):
    """eval with --data measures what it measured before the data moved; generate of a run
    without its own tokenizer copy finds the tokenizer there."""
    run = tmp_path / "run"
    shutil.copytree(text_run / "run", run)
    shutil.copytree(text_run / "data", tmp_path / "data")
    config = run / "config.toml"
    config.write_text(config.read_text().replace(str(text_run / "data"), str(tmp_path / "data")))
    args = ("eval", run, "--depths", "1,4", "--out")
    code, before, err = cli(capsys, *args, tmp_path / "before.json")
    assert code == 0, err
    shutil.move(tmp_path / "data", tmp_path / "moved")
    assert cli(capsys, *args, tmp_path / "lost.json")[0] == 2
    code, after, err = cli(capsys, *args, tmp_path / "after.json", "--data", tmp_path / "moved")
    assert code == 0, err

    # The same table of NLLs; the data line names where the data is now.
    def table(out: str) -> list[str]:
        lines = out.splitlines()[1:-1]
        return [line for line in lines if not line.startswith(("data: ", "wrote "))]

    assert table(before) == table(after) and "moved" in after
    shutil.rmtree(run / "tokenizer")
    generate = ("generate", run, "--prompt", "the", "--max-new-tokens", "4")
    assert cli(capsys, *generate)[0] == 2
    code, _, err = cli(capsys, *generate, "--data", tmp_path / "moved")
    assert code == 0, err
