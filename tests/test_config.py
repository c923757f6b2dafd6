"""Configuration: unknown keys, wrong types, impossible values: one-line errors naming the key."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from fixedfirst.cli.main import main
from fixedfirst.config import load_config, to_toml

BAD_CONFIGS = [
    # (TOML text, a fragment the one-line error must contain)
    ("[model]\nd_modle = 64\n", "unknown key model.d_modle"),
    ("[modle]\nd_model = 64\n", "unknown section [modle]"),
    ('[model]\nd_model = "wide"\n', "model.d_model: expected an integer"),
    ("[model]\nd_model = 100\nn_heads = 3\n", "model.d_model: 100 is not divisible by n_heads = 3"),
    ('[model]\nmlp = "relu"\n', "model.mlp: 'relu' is not one of"),
    ("[model]\nn_core = 0\n", "model.n_core"),
    (
        '[schedule]\nkind = "fixed-first"\nk0 = 20\nk_max = 16\n',
        "schedule.k0: 20 exceeds k_max = 16",
    ),
    ("[schedule]\nswitch = 1.5\n", "schedule.switch: must be in [0, 1]"),
    ("[train.lowrank]\nrank = 0\n", "train.lowrank: rank must be in 1..65536, got 0"),
    (
        '[train.lowrank]\ntargets = ["q_proj.linear", "q_proj.linear"]\n',
        "train.lowrank: targets: 'q_proj.linear' is listed twice",
    ),
    ("[schedule]\nswitch = -0.1\n", "schedule.switch: must be in [0, 1]"),
    ('[schedule]\nkind = "fixed"\ndepth = 0\n', "schedule.depth: must be >= 1"),
    ('[schedule]\nkind = "fixed"\ndepth = -3\n', "schedule.depth: must be >= 1"),
    ('[schedule]\nkind = "cosine"\n', "schedule.kind: 'cosine' is not one of"),
    ("[schedule]\nk_min = 5\nk_max = 4\n", "schedule.k_max: 4 is below k_min = 5"),
    ("[eval]\ndepths = [1, 0, 4]\n", "eval.depths: depths must be >= 1"),
    ("[train]\ntokens = 0\n", "train.tokens: the token budget must be > 0"),
    ("[train]\nflops = 0.0\n", "train.flops: the FLOP budget must be > 0"),
    ("[train]\nlr = nan\n", "train.lr: must be a finite number"),
    ("[schedule]\nswitch = inf\n", "schedule.switch: must be a finite number"),
    ("[train]\nseq_len = 1000\n", "train.seq_len: 1000 exceeds model.max_seq_len"),
    ("[train]\nbatch_size = 8\nmicro_batch_size = 3\n", "train.micro_batch_size"),
    ('[train]\ncompile = "yes"\n', "train.compile: expected true or false or 'auto'"),
    ("[train]\nthreads = 0\n", "train.threads: must be >= 1"),
    ("[train]\ncheckpoint_activations = 1\n", "train.checkpoint_activations: expected true or"),
    ('[schedule]\nswitch = "late"\n', "schedule.switch: expected a number or 'auto', got 'late'"),
    ("[switch]\nfloor = 0.8\nceiling = 0.6\n", "switch.floor: 0.8 is above ceiling = 0.6"),
    ("[switch]\nthreshold = -0.1\n", "switch.threshold: must be >= 0"),
    ("[switch]\nceiling = 1.0\n", "switch.ceiling: must be in (0, 1), got 1.0"),
    ("[switch]\nz = -1\n", "switch.z: must be in [0, 10], got -1.0"),
    ('[switch]\nrule = "loss"\n', "switch.rule: 'loss' is not one of 'plateau', 'depth-gap'"),
    (
        '[schedule]\nswitch = "auto"\n[switch]\nrule = "depth-gap"\ndepth = 2\n',
        "switch.depth: 2 must be deeper than schedule.k0 = 2",
    ),
    ('[data]\nkind = "tokens"\n', "data.path"),
    ("[model\nd_model = 64\n", "TOML syntax error"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD_CONFIGS, ids=[b[1][:40] for b in BAD_CONFIGS])
def test_bad_config_is_one_line_error(tmp_path, capsys, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["compute", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("schedule.k0=0", "schedule.k0: must be >= 1"),
        ("train.tokens=-5", "train.tokens"),
        ("nosection.key=1", "unknown section [nosection]"),
        ("model.d_model", "expected section.key=value"),
        ("train.nope=1", "unknown key train.nope"),
    ],
)
def test_bad_override_is_one_line_error(tmp_path, capsys, override, fragment):
    path = tmp_path / "run.toml"
    path.write_text("[train]\ntokens = 100000\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["compute", str(path), "--set", override])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_missing_config_file(capsys):
    with pytest.raises(SystemExit):
        main(["compute", "/nonexistent/run.toml"])
    assert "does not exist" in capsys.readouterr().err


def test_overrides_are_typed_and_bare_strings_work():
    config = load_config(
        None,
        ["schedule.kind=fixed-first", "schedule.k0=4", "train.lr=3e-4", "eval.depths=[1, 2]"],
    )
    assert config.schedule.kind == "fixed-first" and config.schedule.k0 == 4
    assert config.train.lr == 3e-4 and config.eval.depths == [1, 2]
    assert load_config(None, ["train.flops=none"]).train.flops is None


def test_resolved_toml_round_trips(tmp_path):
    config = load_config(None, ["schedule.mean=6.5", "train.flops=1e15", "model.norm=sandwich"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    assert load_config(path) == config


def test_error_exit_from_a_real_process(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[schedule]\nkind = "fixed-first"\nk0 = 17\n')
    proc = subprocess.run(
        [sys.executable, "-m", "fixedfirst", "compute", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fixedfirst compute: error: schedule.k0: 17 exceeds k_max = 16; lower k0 or raise k_max"
    ]


def test_a_data_kinds_options_live_in_their_own_table(tmp_path):
    """[data.bios] is read, set with --set data.bios.KEY, completed with defaults when
    resolved, and written back as its own table (so a run's config.toml round-trips)."""
    from fixedfirst.config import to_toml
    from fixedfirst.data.registry import kind_options, resolve_data

    path = tmp_path / "bios.toml"
    path.write_text('[data]\nkind = "bios"\nseed = 3\n\n[data.bios]\npeople = 40\n')
    config = load_config(path, ["data.bios.cities=9"])
    assert config.data.options == {"people": 40, "cities": 9}
    resolved = resolve_data(config)
    options = kind_options(resolved)
    assert (options.people, options.cities, options.majors) == (40, 9, 100)
    assert set(resolved.data.options) == {f.name for f in dataclasses.fields(options)}
    text = to_toml(resolved)
    assert "[data.bios]\npeople = 40\n" in text
    again = tmp_path / "again.toml"
    again.write_text(text)
    assert load_config(again) == resolved
    plain = resolve_data(load_config(None))
    assert plain.data.kind == "synthetic" and plain.data.options == {}
    assert "[data." not in to_toml(plain)
