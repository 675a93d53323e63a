"""The one run path: lock, staging and swap, manifest, checkpoints and resume, device defaults.

A small two-phase bake (a linear map fitted to a fixed one) exercises the runner without any
product's cost; the products' own runs are tested in their test modules and in test_kill_resume.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from neuralbake.bakes.folder import ASIDE_DIR, STATE_DIR, finish_swap, folder_lock
from neuralbake.bakes.run import Bake, BakeOutcome, BakeRun, run_bake
from neuralbake.errors import BundleError, InputError, TrainingError
from neuralbake.io.manifest import verify_bake_folder
from neuralbake.nn.trainer import Batch, TrainerConfig, TrainingInterrupted


@dataclass
class LineConfig:
    """Fit y = A x with two phases."""

    size: int | None = None
    """Input width (device default when None)."""
    device: str = "cpu"
    """Where it runs."""
    fail_in_body: bool = False
    """Raise inside the body after training (error-path tests)."""
    refuse_input: bool = False
    """Refuse the input at the start of the body, before any training (as a bake refuses a bad file)."""
    train: TrainerConfig = field(default_factory=lambda: TrainerConfig(steps=20, learning_rate=0.05, precision="fp32", log_every=5, eval_every=10, checkpoint_every=0, checkpoint_seconds=0))
    """Optimisation."""

    def validate(self) -> None:
        if self.size is None or self.size < 1:
            raise ValueError("size unresolved")


class LineSampler:
    batch_size = 16

    def __init__(self, size: int) -> None:
        self.matrix = torch.linspace(-1, 1, size * 2).reshape(2, size)

    def sample(self, generator: torch.Generator) -> Batch:
        x = torch.randn(self.batch_size, self.matrix.shape[1], generator=generator)
        return Batch(x, x @ self.matrix.T)


def _body(run: BakeRun) -> BakeOutcome:
    config: LineConfig = run.config
    if config.refuse_input:
        raise InputError("the input is refused on purpose.", field="image")
    torch.manual_seed(0)
    model = torch.nn.Linear(config.size, 2, bias=False)
    sampler = LineSampler(config.size)
    loss = torch.nn.functional.mse_loss
    first = run.train(model, sampler, loss, config.train, phase="coarse", compatibility={"size": config.size})
    fine = TrainerConfig(**{**config.train.__dict__, "learning_rate": 0.01})
    second = run.train(model, sampler, loss, fine, phase="fine", lr_scales={"weight": 0.5})
    if config.fail_in_body:
        raise TrainingError("the body failed on purpose.")
    torch.save(model.state_dict(), run.stage / "model.pt")
    (run.stage / "sub").mkdir()
    (run.stage / "sub" / "note.txt").write_text("nested outputs are covered too\n")
    return BakeOutcome({"final_loss": second.final_loss}, {"steps": [first.steps, second.steps]}, curve_title="line", quality_key=None)


LINE = Bake("line", LineConfig, _body, device_defaults=lambda config, device: {"size": 8 if device.type == "cuda" else 4})


def _weights(out: Path) -> torch.Tensor:
    return torch.load(out / "model.pt", weights_only=True)["weight"]


def test_a_bake_writes_its_files_a_manifest_and_the_defaults_it_chose(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = run_bake(LINE, LineConfig(), out, progress=False)
    assert report["device_defaults"] == {"size": 4}
    assert json.loads((out / "config.json").read_text())["size"] == 4
    manifest = verify_bake_folder(out)
    assert manifest is not None and set(manifest["files"]) >= {"model.pt", "sub/note.txt", "report.json", "config.json", "events.jsonl", "loss.png"}
    assert not (out / STATE_DIR / "staging").exists()
    assert (out / STATE_DIR / "checkpoints" / "fine.pt").is_file()
    explicit = run_bake(LINE, LineConfig(size=6), tmp_path / "explicit", progress=False)
    assert explicit["device_defaults"] == {}


@pytest.mark.parametrize("name", ["model.pt", "sub/note.txt", "report.json"])
def test_a_flipped_byte_in_any_file_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    path = tmp_path / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="sha256") as caught:
        verify_bake_folder(tmp_path)
    assert name.split("/")[-1] in str(caught.value)
    path.unlink()
    with pytest.raises(BundleError, match="missing"):
        verify_bake_folder(tmp_path)


def test_a_second_bake_on_a_locked_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / STATE_DIR).mkdir()
    with folder_lock(tmp_path / STATE_DIR / "lock", tmp_path):
        with pytest.raises(InputError, match="another bake is writing"):
            run_bake(LINE, LineConfig(), tmp_path, progress=False)
    run_bake(LINE, LineConfig(), tmp_path, progress=False)  # free again once the first lets go


def test_a_failed_bake_leaves_the_previous_bundle_whole(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(TrainingError, match="on purpose"):
        run_bake(LINE, LineConfig(size=5, fail_in_body=True), tmp_path, progress=False)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before
    assert not (tmp_path / STATE_DIR / "staging").exists()
    verify_bake_folder(tmp_path)


def test_a_new_bake_replaces_only_the_files_of_the_previous_one(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("the user's own file\n")
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    (tmp_path / "model.pt").write_bytes(b"stale")
    run_bake(LINE, LineConfig(size=5), tmp_path, progress=False)
    assert (tmp_path / "mine.txt").read_text() == "the user's own file\n"
    assert _weights(tmp_path).shape == (2, 5)
    verify_bake_folder(tmp_path)


def test_a_swap_cut_short_is_finished_by_the_next_bake(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    state = tmp_path / STATE_DIR
    stage = state / "staging"
    stage.mkdir()
    (stage / "report.json").write_text('{"new": true}\n')
    (stage / "bake.json").write_text("{}\n")
    # The journal is written and one file was already moved when the process died.
    (state / "swap.json").write_text(json.dumps({"new": ["bake.json", "model.pt", "report.json"], "old": ["bake.json", "model.pt", "report.json"]}))
    (tmp_path / "model.pt").write_bytes(b"moved in before the crash")
    finish_swap(tmp_path, state)
    assert (tmp_path / "model.pt").read_bytes() == b"moved in before the crash"
    assert json.loads((tmp_path / "report.json").read_text()) == {"new": True}
    assert not (state / "swap.json").exists() and not stage.exists()


def _stop_at(step: int, phase_steps: int = 20):
    calls = {"n": 0}

    def hook(trainer, _step) -> None:
        calls["n"] += 1
        if calls["n"] == step:
            trainer.request_stop()

    return hook


@pytest.mark.parametrize("stop_after", [7, 26])  # inside the first phase; inside the second
def test_an_interrupted_bake_resumes_to_the_same_result(tmp_path: Path, stop_after: int) -> None:
    straight = tmp_path / "straight"
    run_bake(LINE, LineConfig(), straight, progress=False)
    out = tmp_path / "stopped"
    with pytest.raises(TrainingInterrupted):
        run_bake(LINE, LineConfig(), out, progress=False, on_step=_stop_at(stop_after))
    assert not (out / "report.json").exists()  # nothing half-done in the folder itself
    assert (out / STATE_DIR / "staging" / "config.json").is_file()  # config.json was written first
    report = run_bake(LINE, LineConfig(), out, progress=False, resume=True)
    assert report["resumed"] is True
    assert torch.equal(_weights(out), _weights(straight))
    verify_bake_folder(out)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("interrupted") == 1


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="no checkpoint to resume from"):
        run_bake(LINE, LineConfig(), tmp_path, progress=False, resume=True)


def test_resuming_a_finished_bake_with_more_steps_extends_it(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    longer = LineConfig()
    longer.train.steps = 30
    report = run_bake(LINE, longer, tmp_path, progress=False, resume=True)
    assert report["steps"] == [30, 30]


def test_the_runner_does_not_change_the_callers_config(tmp_path: Path) -> None:
    config = LineConfig()
    run_bake(LINE, config, tmp_path, progress=False)
    assert config.size is None


def test_a_folder_the_previous_bake_did_not_write_whole_is_never_removed(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    mine = tmp_path / "Documents"
    mine.mkdir()
    (mine / "thesis.txt").write_text("precious\n")
    # A stale or forged bake.json that names the user's folder (its own listed file is gone).
    manifest = json.loads((tmp_path / "bake.json").read_text())
    manifest["files"]["Documents/old_output.bin"] = {"bytes": 1, "sha256": "0" * 64}
    (tmp_path / "bake.json").write_text(json.dumps(manifest))
    run_bake(LINE, LineConfig(size=5), tmp_path, progress=False)
    assert (mine / "thesis.txt").read_text() == "precious\n"
    verify_bake_folder(tmp_path)


def test_a_users_file_with_an_outputs_name_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "thesis.txt").write_text("precious\n")
    with pytest.raises(InputError, match="already holds 'sub'"):
        run_bake(LINE, LineConfig(), tmp_path, progress=False)
    assert (tmp_path / "sub" / "thesis.txt").read_text() == "precious\n"
    assert any((tmp_path / STATE_DIR / "checkpoints").glob("*.pt"))  # the training is kept
    (tmp_path / "sub" / "thesis.txt").rename(tmp_path / "thesis.txt")
    (tmp_path / "sub").rmdir()
    report = run_bake(LINE, LineConfig(), tmp_path, progress=False, resume=True)
    assert report["resumed"] is True and verify_bake_folder(tmp_path) is not None


def test_a_rejected_resume_keeps_the_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(TrainingInterrupted):
        run_bake(LINE, LineConfig(), tmp_path, progress=False, on_step=_stop_at(5))
    other = LineConfig()
    other.train.learning_rate = 0.5
    with pytest.raises(TrainingError, match="learning_rate"):
        run_bake(LINE, other, tmp_path, progress=False, resume=True)
    assert (tmp_path / STATE_DIR / "checkpoints" / "coarse.pt").is_file()
    assert run_bake(LINE, LineConfig(), tmp_path, progress=False, resume=True)["resumed"] is True


def test_a_second_ctrl_c_keeps_the_checkpoints(tmp_path: Path) -> None:
    calls = {"n": 0}

    def abort(trainer, step) -> None:
        calls["n"] += 1
        if calls["n"] == 25:  # inside the second phase
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bake(LINE, LineConfig(), tmp_path, progress=False, on_step=abort)
    assert (tmp_path / STATE_DIR / "checkpoints" / "coarse.pt").is_file()


def test_extending_an_earlier_phase_restarts_the_later_ones(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    before = _weights(tmp_path)
    longer = LineConfig()
    longer.train.steps = 60
    report = run_bake(LINE, longer, tmp_path, progress=False, resume=True)
    assert report["steps"] == [60, 60]
    straight = run_bake(LINE, longer, tmp_path / "straight", progress=False)
    assert straight["steps"] == [60, 60]
    assert not torch.equal(_weights(tmp_path), before)  # the extra training of phase 1 is not thrown away


def test_stale_staged_files_do_not_leak_into_a_resumed_bake(tmp_path: Path) -> None:
    with pytest.raises(TrainingInterrupted):
        run_bake(LINE, LineConfig(), tmp_path, progress=False, on_step=_stop_at(5))
    stage = tmp_path / STATE_DIR / "staging"
    (stage / "leftover_from_another_run").mkdir()
    (stage / ".model.pt.x.partial").write_bytes(b"half")
    run_bake(LINE, LineConfig(), tmp_path, progress=False, resume=True)
    assert not (tmp_path / "leftover_from_another_run").exists() and not list(tmp_path.glob(".*.partial"))
    verify_bake_folder(tmp_path)


def test_an_edited_bake_json_is_caught_even_after_a_verify(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    verify_bake_folder(tmp_path)
    manifest = json.loads((tmp_path / "bake.json").read_text())
    manifest["files"]["model.pt"]["sha256"] = "0" * 64
    (tmp_path / "bake.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="sha256"):
        verify_bake_folder(tmp_path)


def test_an_unfinished_bake_folder_is_refused_by_readers(tmp_path: Path) -> None:
    with pytest.raises(TrainingInterrupted):
        run_bake(LINE, LineConfig(), tmp_path, progress=False, on_step=_stop_at(5))
    with pytest.raises(BundleError, match="never finished"):
        verify_bake_folder(tmp_path)


def _previewing_body(run: BakeRun) -> BakeOutcome:
    """The line bake, publishing a picture of its weights at every evaluation (and arrays once)."""
    config: LineConfig = run.config
    torch.manual_seed(0)
    model = torch.nn.Linear(config.size, 2, bias=False)

    def evaluate(m: torch.nn.Module) -> dict[str, float]:
        run.preview_image("weights", lambda: (m.weight.detach().clamp(-1, 1) * 0.5 + 0.5).numpy()[..., None].repeat(3, -1), max_side=2)
        return {"norm": float(m.weight.norm())}

    run.preview_arrays("facts", {"size": [config.size]})
    run.train(model, LineSampler(config.size), torch.nn.functional.mse_loss, config.train, phase="coarse", evaluate=evaluate)
    run.train(model, LineSampler(config.size), torch.nn.functional.mse_loss, config.train, phase="fine", evaluate=evaluate)
    return BakeOutcome({}, {})


PREVIEWING = Bake("line", LineConfig, _previewing_body, device_defaults=lambda config, device: {"size": 4})


def test_previews_are_made_only_when_watched_numbered_across_phases_and_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np
    from PIL import Image

    import neuralbake.bakes.run as runner

    run_bake(PREVIEWING, LineConfig(), tmp_path / "quiet", progress=False)
    assert not (tmp_path / "quiet" / STATE_DIR / "previews").exists()
    monkeypatch.setattr(runner, "PREVIEW_VERSIONS", 4)
    out = tmp_path / "watched"
    run_bake(PREVIEWING, LineConfig(), out, progress=False, previews=True)
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    shown = [e for e in events if e["event"] == "preview"]
    # evaluations at steps 0, 10, 20 of each phase: six pictures, numbered on across the phases
    assert [(e["phase"], e["step"]) for e in shown] == [("coarse", 0), ("coarse", 10), ("coarse", 20), ("fine", 0), ("fine", 10), ("fine", 20)]
    assert [e["file"] for e in shown] == [f"weights.{n:06d}.png" for n in range(1, 7)]
    folder = out / STATE_DIR / "previews"
    assert sorted(p.name for p in folder.glob("*.png")) == [f"weights.{n:06d}.png" for n in range(3, 7)]  # the newest 4 kept
    picture = np.asarray(Image.open(folder / "weights.000006.png"))
    assert picture.shape[:2] == (1, 2) and (shown[-1]["width"], shown[-1]["height"]) == (2, 1)  # shrunk to max_side
    with np.load(folder / "facts.npz", allow_pickle=False) as facts:
        assert facts["size"].tolist() == [4]
    run_bake(PREVIEWING, LineConfig(), out, progress=False, previews=True)  # a new bake starts its pictures afresh
    assert min(p.name for p in folder.glob("*.png")) == "weights.000003.png"
    assert json.loads((out / "events.jsonl").read_text().splitlines()[-1])["event"] == "done"


def test_a_preview_name_must_be_plain(tmp_path: Path) -> None:
    def body(run: BakeRun) -> BakeOutcome:
        run.preview_image("../escape", lambda: [[0.0]])
        return BakeOutcome({}, {})

    with pytest.raises(ValueError, match="preview name"):
        run_bake(Bake("bad", LineConfig, body, device_defaults=lambda c, d: {"size": 4}), LineConfig(), tmp_path / "o", progress=False, previews=True)


# -- a refused bake changes nothing ------------------------------------------------------------


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the runner's own folder too) with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("previous", ["finished", "interrupted"])
def test_a_bake_refused_before_training_changes_nothing_in_the_folder(tmp_path: Path, previous: str) -> None:
    """The data-loss bug: a refused bake on a folder removed the previous bake's checkpoints (and staging and previews), so
    the next --resume had nothing to resume from."""
    if previous == "finished":
        run_bake(PREVIEWING, LineConfig(), tmp_path, progress=False, previews=True)
    else:
        with pytest.raises(TrainingInterrupted):
            run_bake(PREVIEWING, LineConfig(), tmp_path, progress=False, previews=True, on_step=_stop_at(26))
    before = _tree(tmp_path)
    assert any(name.startswith(f"{STATE_DIR}/checkpoints/") for name in before) and any(f"{STATE_DIR}/previews/" in name for name in before)
    for resume in (False, True):  # a new bake, and a resumed one, each refused before training
        with pytest.raises(InputError, match="on purpose"):
            run_bake(LINE, LineConfig(size=5, refuse_input=True), tmp_path, progress=False, previews=True, resume=resume)
        assert _tree(tmp_path) == before
    longer = LineConfig()
    longer.train.steps = 30
    report = run_bake(PREVIEWING, longer, tmp_path, progress=False, previews=True, resume=True)
    assert report["resumed"] is True and not (tmp_path / STATE_DIR / ASIDE_DIR).exists()
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("bake") == 2  # one history: the first run's log carried over, the refused runs' not in it


def test_a_failure_after_training_keeps_the_new_checkpoints_not_the_old(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    with pytest.raises(TrainingError, match="on purpose"):
        run_bake(LINE, LineConfig(size=5, fail_in_body=True), tmp_path, progress=False)
    assert not (tmp_path / STATE_DIR / ASIDE_DIR).exists()
    report = run_bake(LINE, LineConfig(size=5), tmp_path, progress=False, resume=True)  # the size-5 training is what resumes
    assert report["resumed"] is True and _weights(tmp_path).shape == (2, 5)


_KILLED_RUN = """
import os, signal, sys
from tests.bakes.test_run import LINE, LineConfig
from neuralbake.bakes.run import run_bake

calls = [0]
def hook(trainer, step):
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)

run_bake(LINE, LineConfig(size=5), sys.argv[1], progress=False, on_step=hook)
"""


def _killed_bake(out: Path, at_step: int, *, set_aside: bool) -> None:
    """A new bake (size 5) on ``out``, killed with SIGKILL at its ``at_step``-th step; whether the previous bake's state
    is still set aside (on disk) when the kill lands."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", _KILLED_RUN, str(out), str(at_step)]
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == -9, result.stdout + result.stderr
    assert (out / STATE_DIR / ASIDE_DIR).is_dir() == set_aside


def test_a_kill_before_the_first_checkpoint_gives_the_previous_bake_back(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    before = _tree(tmp_path)
    _killed_bake(tmp_path, 5, set_aside=True)  # inside the first phase: no checkpoint of its own yet
    with pytest.raises(InputError, match="on purpose"):  # the next bake on the folder settles what the killed one set aside
        run_bake(LINE, LineConfig(refuse_input=True), tmp_path, progress=False)
    assert _tree(tmp_path) == before
    longer = LineConfig()
    longer.train.steps = 30
    assert run_bake(LINE, longer, tmp_path, progress=False, resume=True)["steps"] == [30, 30]


def test_a_kill_after_the_first_checkpoint_keeps_the_killed_bakes_training(tmp_path: Path) -> None:
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    _killed_bake(tmp_path, 25, set_aside=False)  # inside the second phase: dropped at its first checkpoint
    report = run_bake(LINE, LineConfig(size=5), tmp_path, progress=False, resume=True)
    assert report["resumed"] is True and not (tmp_path / STATE_DIR / ASIDE_DIR).exists()
    straight = run_bake(LINE, LineConfig(size=5), tmp_path / "straight", progress=False)
    assert report["steps"] == straight["steps"] and torch.equal(_weights(tmp_path), _weights(tmp_path / "straight"))


def test_what_a_killed_bake_set_aside_is_settled_by_the_rule(tmp_path: Path) -> None:
    """The states a kill can leave, settled by the next bake: killed while setting aside (no record yet), after its own
    checkpoint but before it dropped the old ones, inside its swap (it had finished), inside a restore."""
    from neuralbake.bakes.folder import prepare_state, settle_aside

    state = tmp_path / STATE_DIR
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    before = _tree(tmp_path)
    prepare_state(tmp_path, state, resume=False)  # a new bake set the old state aside ...
    (state / ASIDE_DIR / "set_aside.json").unlink()  # ... and was killed before its record was written
    assert settle_aside(state) == "restored" and _tree(tmp_path) == before
    prepare_state(tmp_path, state, resume=False)
    (state / "checkpoints" / "coarse.pt").write_bytes(b"its own")  # killed after its own checkpoint, before the drop
    assert settle_aside(state) == "dropped" and not (state / ASIDE_DIR).exists()
    assert (state / "checkpoints" / "coarse.pt").read_bytes() == b"its own"
    shutil.rmtree(state)
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    prepare_state(tmp_path, state, resume=False)
    assert settle_aside(state, finished=True) == "dropped"  # a swap journal was found: it had finished
    run_bake(LINE, LineConfig(), tmp_path, progress=False)
    before = _tree(tmp_path)
    prepare_state(tmp_path, state, resume=False)
    record = json.loads((state / ASIDE_DIR / "set_aside.json").read_text())
    (state / ASIDE_DIR / "set_aside.json").write_text(json.dumps({**record, "restore": True}))
    os.replace(state / ASIDE_DIR / "checkpoints", state / "checkpoints.tmp")  # killed inside a restore: one folder already back
    shutil.rmtree(state / "checkpoints")
    os.replace(state / "checkpoints.tmp", state / "checkpoints")
    assert settle_aside(state) == "restored" and _tree(tmp_path) == before


def test_a_missing_input_is_file_not_found_naming_the_field(tmp_path: Path) -> None:
    """Every path field, at any depth (a NAME=PATH source, a chain's stage option, a list item), is checked before the
    bake reads anything: a typo'd path is ``file not found: PATH`` naming the field, whatever reader would meet it."""
    from neuralbake.bakes.lod import LodConfig
    from neuralbake.bakes.neural_material import NeuralMaterialConfig
    from neuralbake.bakes.ntc import NTCConfig
    from neuralbake.bakes.run import check_input_paths
    from neuralbake.errors import InputError

    there = tmp_path / "there.png"
    there.write_bytes(b"x")
    cases = [
        (NeuralMaterialConfig(material=str(tmp_path / "DamagedHelmet.glb")), "material", "file not found: "),
        (NTCConfig(sources=[str(there), f"normal={tmp_path / 'normal.png'}"]), "sources[1]", "file not found: "),
        (LodConfig(asset=str(there), stage_options={"fit": {"weights": str(tmp_path / "mask.png")}}), "stage_options.fit.weights", "file not found: "),
    ]
    for config, name, problem in cases:
        with pytest.raises(InputError) as caught:
            check_input_paths(config)
        missing = str(caught.value).split(problem, 1)[1].split(". Fix:", 1)[0]
        assert caught.value.field == name and not Path(missing).exists() and missing.startswith(str(tmp_path)), str(caught.value)
    check_input_paths(NTCConfig(sources=[str(there), f"normal={there}"]))  # all there: nothing to say
    check_input_paths(LodConfig(asset=str(there)))


# -- the kernel path, decided once on the run ---------------------------------------------------


def test_the_run_decides_each_works_kernel_path_once_and_the_report_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run.kernels``: the path for each piece of work with why, kept on the run and written to ``kernel_paths``; ``auto``
    takes PyTorch where a measurement says it is faster, or where the fused trial fails; ``triton`` insists."""
    import neuralbake.kernels as kernels_module

    monkeypatch.setattr(kernels_module, "interpreting", lambda: False)  # as on a GPU with Triton
    monkeypatch.setattr(kernels_module, "triton_installed", lambda: True)
    chosen: dict[str, str] = {}

    def body(run: BakeRun) -> BakeOutcome:
        run.device = torch.device("cuda")  # kernel_choice reads only the device's type: nothing runs on it

        def broken() -> None:
            raise RuntimeError("ptxas fatal")

        chosen["train"] = run.kernels("train", "auto", dtype=torch.float16, torch_faster="the graphed PyTorch step measured faster")
        chosen["decode"] = run.kernels("decode", "auto", dtype=torch.float16, trial=lambda: None)
        chosen["texels"] = run.kernels("texels", "auto", dtype=torch.float16, trial=broken)
        chosen["fp32"] = run.kernels("fp32", "auto", dtype=torch.float32)
        chosen["wide"] = run.kernels("wide", "auto", "a layer is 256 wide", dtype=torch.float16)
        chosen["forced"] = run.kernels("forced", "triton", dtype=torch.float16, torch_faster="ignored: triton insists", trial=lambda: None)
        return BakeOutcome({}, {})

    report = run_bake(Bake("kernels", LineConfig, body, device_defaults=lambda c, d: {"size": 4}), LineConfig(), tmp_path / "o", progress=False)
    assert chosen == {"train": "torch", "decode": "triton", "texels": "torch", "fp32": "torch", "wide": "torch", "forced": "triton"}
    why = {work: entry["why"] for work, entry in report["kernel_paths"].items()}
    assert {work: entry["path"] for work, entry in report["kernel_paths"].items()} == chosen
    assert why["train"] == "auto: the graphed PyTorch step measured faster"
    assert why["decode"] == "auto: the fused kernels run this network here"
    assert "ptxas fatal" in why["texels"] and "fp32" in why["fp32"] and why["wide"] == "auto: a layer is 256 wide"
    assert why["forced"] == "--kernels triton"
