"""Every command that reads a file, fed hostile and broken inputs: a clear error, never a traceback,
never a hang, never a read outside the input's folder, and no output folder left behind.

The static cases come from ``tests/data/bad_inputs/cases.json`` (built by
``tests/data/make_bad_inputs.py``); bundle cases mutate real tiny bakes made here, since the bundle
format follows the code. Each case runs in-process through the CLI with a time limit. Reads of
the sentinel file beside the corpus (and of ``/etc/passwd``) are caught with an audit hook, which
sees every ``open`` made through Python (Pillow, pygltflib, pypng, json and our own readers).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from neuralbake import cli as cli_module
from neuralbake.cli import common as cli_run
from neuralbake.io.manifest import write_bake_manifest

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "bad_inputs"
SENTINEL = DATA / "SENTINEL_outside.bin"
CASES = json.loads((CORPUS / "cases.json").read_text())
TIME_LIMIT_S = 90
"""Per case: the slowest legitimate case (20 diverging training steps) takes a few seconds."""

_FORBIDDEN = {os.path.realpath(SENTINEL), "/etc/passwd", "/etc/shadow"}
_watch: dict[str, Any] = {"on": False, "opened": []}


def _audit(event: str, args: tuple) -> None:
    if not _watch["on"] or event not in ("open", "os.open"):
        return
    path = args[0] if args else None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if isinstance(path, str | os.PathLike) and os.path.realpath(path) in _FORBIDDEN:
        _watch["opened"].append(os.fspath(path))


sys.addaudithook(_audit)  # cannot be removed; it does nothing unless a test switches it on


class CaseTimeout(Exception):
    """A case ran past its time limit (a hang)."""


@pytest.fixture
def watch() -> Iterator[list[str]]:
    """Switch the sentinel watch on for one test; yields the list of forbidden opens."""
    _watch["opened"] = []
    _watch["on"] = True
    try:
        yield _watch["opened"]
    finally:
        _watch["on"] = False


def _run(argv: list[str]) -> tuple[int, str, BaseException | None]:
    """Run ``neuralbake ARGV`` in-process as ``main()`` would, within the time limit."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"ran past {TIME_LIMIT_S} s")

    old_width = cli_run._err.width
    cli_run._err.width = 10_000  # no line wrapping inside paths and field names
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    try:
        try:
            argv = cli_module._normalise_argv(argv)
        except SystemExit as exc:
            return int(exc.code or 0), "error: --out is empty", None
        result = CliRunner().invoke(cli_module.app, argv, env={"COLUMNS": "10000"})
        return result.exit_code, result.output, result.exception
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        cli_run._err.width = old_width


def _check_refusal(argv: list[str], out: Path, expect: str, exit_code: int, opened: list[str]) -> None:
    code, output, exception = _run(argv)
    flat = " ".join(output.split())
    assert not isinstance(exception, CaseTimeout), f"hang: {argv}"
    assert exception is None or isinstance(exception, SystemExit), f"traceback ({type(exception).__name__}: {exception}):\n{output}"
    assert "Traceback" not in output, output
    assert "Usage:" not in output and "╭" not in output, f"a usage box instead of one error line:\n{output}"
    assert code == exit_code, f"exit {code}, expected {exit_code}:\n{output}"
    assert "error" in flat.lower(), output
    assert expect.lower() in flat.lower(), f"the message should mention {expect!r}:\n{output}"
    assert not opened, f"read outside the input's folder: {opened}"
    assert not out.exists(), f"a failed command left its output folder behind: {sorted(p.name for p in out.iterdir())}"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_corpus_case_is_refused_cleanly(case: dict, tmp_path: Path, watch: list[str]) -> None:
    folder = CORPUS / case["id"]
    out = tmp_path / "out"
    argv = [a.replace("{case}", str(folder)).replace("{out}", str(out)).replace("{sentinel}", str(SENTINEL)) for a in case["argv"]]
    _check_refusal(argv, out, case["expect"], case["exit_code"], watch)


# --- bundles: mutations of real tiny bakes ------------------------------------------------------------


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from neuralbake.bakes.neural_material import NeuralMaterialConfig, bake_neural_material
    from neuralbake.bakes.neural_texture import NeuralTextureConfig, bake_neural_texture

    root = tmp_path_factory.mktemp("bundles")
    image = Path(__file__).resolve().parents[2] / "examples/neural_texture/grace_hopper_256.png"
    texture = NeuralTextureConfig(image=str(image), texture_size=(16, 16), device="cpu")
    texture.train.steps = 5
    texture.train.precision = "fp32"
    bake_neural_texture(texture, root / "texture", progress=False)
    velvet = Path(__file__).resolve().parents[2] / "examples/materials/velvet.json"
    # with a sampling head, so the damaged-file cases reach sampler.safetensors too (render and export read it)
    material = NeuralMaterialConfig(
        material=str(velvet), latent=4, texture_size=8, batch_size=64, device="cpu", compare_size=8, compare_spp=1, sampling_steps=3
    )
    material.train.steps = 5
    bake_neural_material(material, root / "material", progress=False)
    return {"texture": root / "texture", "material": root / "material"}


def _walk(node: Any, visit: Callable[[dict, str], bool]) -> bool:
    """Depth-first over a manifest's dicts; stops at the first ``visit`` that returns True."""
    if isinstance(node, dict):
        for key in list(node):
            if visit(node, key) or _walk(node[key], visit):
                return True
    elif isinstance(node, list):
        return any(_walk(item, visit) for item in node)
    return False


def _set_first(key_names: tuple[str, ...], value: Any) -> Callable[[dict], None]:
    def mutate(manifest: dict) -> None:
        def visit(node: dict, key: str) -> bool:
            if key in key_names:
                node[key] = value
                return True
            return False

        assert _walk(manifest, visit), f"no {key_names} in the manifest"

    return mutate


def _halve_first_hidden(manifest: dict) -> None:
    def visit(node: dict, key: str) -> bool:
        if key in ("outputs", "hidden") and isinstance(node[key], int) and node[key] > 4:
            node[key] //= 2
            return True
        return False

    assert _walk(manifest, visit)


_MANIFEST_MUTATIONS: dict[str, tuple[Callable[[dict], None], str]] = {
    "file_is_the_sentinel": (_set_first(("file",), str(SENTINEL)), "file"),
    "file_climbs_out": (_set_first(("file",), "../../../../etc/passwd"), "file"),
    "files_is_a_list": (_set_first(("files",), [1, 2, 3]), "files"),
    "layers_is_a_string": (_set_first(("layers",), "abc"), "layers"),
    "negative_weight_offset": (_set_first(("weight_offset",), -64), "weight_offset"),
    "bytes_is_a_string": (_set_first(("bytes",), "many"), "bytes"),
    "halved_width": (_halve_first_hidden, ""),
    "manifest_is_a_list": (lambda m: m.clear(), ""),
}

_COMMANDS = {
    "texture": [["texture", "infer", "{bundle}", "--out", "{out}/big.png", "--size", "8x8"]],
    "material": [
        ["material", "render", "{bundle}", "--out", "{out}", "--size", "8", "--spp", "1"],
        ["material", "render", "{bundle}", "--out", "{out}", "--size", "8", "--spp", "1", "--filter-latents"],
        ["material", "export", "{bundle}", "--out", "{out}"],
    ],
}


def _copy(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(bundle, target)
    return target


@pytest.mark.parametrize("kind", ["texture", "material"])
@pytest.mark.parametrize("mutation", list(_MANIFEST_MUTATIONS))
def test_damaged_manifest_is_refused_by_every_reader(
    kind: str, mutation: str, bundles: dict[str, Path], tmp_path: Path, watch: list[str]
) -> None:
    bundle = _copy(bundles[kind], tmp_path)
    manifest_path = bundle / "network.json"
    manifest = json.loads(manifest_path.read_text())
    mutate, expect = _MANIFEST_MUTATIONS[mutation]
    if mutation == "manifest_is_a_list":
        manifest = [manifest]
    else:
        mutate(manifest)
    manifest_path.write_text(json.dumps(manifest))
    # Re-seal the folder's bake.json, as someone crafting a bundle would: the structural checks
    # behind the checksums must still hold on their own.
    write_bake_manifest(bundle, bake=json.loads((bundle / "bake.json").read_text())["bake"])
    for argv in _COMMANDS[kind]:
        out = tmp_path / "out"
        argv = [a.replace("{bundle}", str(bundle)).replace("{out}", str(out)) for a in argv]
        _check_refusal(argv, out if "infer" not in argv else out, expect, 2, watch)


@pytest.mark.parametrize("kind", ["texture", "material"])
def test_truncated_or_flipped_bundle_files_are_refused(kind: str, bundles: dict[str, Path], tmp_path: Path, watch: list[str]) -> None:
    for damage in ("truncate", "flip"):
        bundle = _copy(bundles[kind], tmp_path / damage)
        for path in sorted(bundle.glob("*.safetensors")):
            data = bytearray(path.read_bytes())
            if damage == "truncate":
                data = data[: len(data) // 2]
            else:
                data[len(data) // 2] ^= 0x40
            path.write_bytes(bytes(data))
        for argv in _COMMANDS[kind]:
            out = tmp_path / damage / "out"
            argv = [a.replace("{bundle}", str(bundle)).replace("{out}", str(out)) for a in argv]
            _check_refusal(argv, out, "", 2, watch)


@pytest.mark.parametrize("damage", ["nan_weights", "wrong_shape"])
def test_a_resealed_bad_sampling_head_is_refused_by_render_and_export(damage: str, bundles: dict[str, Path], tmp_path: Path, watch: list[str]) -> None:
    """A sampling head that passes the checksums (bake.json re-sealed) but holds NaNs or a tensor of the wrong shape: every
    reader of the bundle (render, and export, which packs the head into the shader) names the file and the field."""
    from safetensors.torch import load_file, save_file

    bundle = _copy(bundles["material"], tmp_path)
    head = bundle / "sampler.safetensors"
    assert head.is_file()
    tensors = load_file(str(head))
    name = min(tensors)
    if damage == "nan_weights":
        tensors[name] = torch.full_like(tensors[name], float("nan"))
    else:
        tensors[name] = torch.zeros(*[d + 1 for d in tensors[name].shape])
    save_file(tensors, str(head))
    write_bake_manifest(bundle, bake=json.loads((bundle / "bake.json").read_text())["bake"])
    for argv in _COMMANDS["material"]:
        out = tmp_path / "out"
        argv = [a.replace("{bundle}", str(bundle)).replace("{out}", str(out)) for a in argv]
        _check_refusal(argv, out, "sampling head", 2, watch)


def test_material_render_against_another_material_is_refused(bundles: dict[str, Path], tmp_path: Path) -> None:
    other = Path(__file__).resolve().parents[2] / "examples/materials/rusty_iron_nail.json"
    out = tmp_path / "out"
    argv = ["material", "render", str(bundles["material"]), "--material", str(other), "--out", str(out), "--size", "8", "--spp", "1"]
    _check_refusal(argv, out, "material", 2, [])


def test_infer_refuses_a_folder_and_a_non_png_name(bundles: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "exists").mkdir()
    for target, expect in ((tmp_path / "exists", "folder"), (tmp_path / "x.jpg", "png")):
        code, output, exception = _run(["texture", "infer", str(bundles["texture"]), "--out", str(target), "--size", "8x8"])
        assert exception is None or isinstance(exception, SystemExit), output
        assert code == 2 and expect in output.lower(), output
    assert not (tmp_path / "x.jpg").exists()


# --- option values the command line parses itself ---------------------------------------------------


_BAD_OPTION_VALUES = {
    "texture infer": (["texture", "infer", "{tmp}/bundle", "--out", "{out}/big.png", "--size", "0x5"], "--size"),
    "texture bake": (["texture", "bake", "{tmp}/image.png", "--out", "{out}", "--steps", "many"], "--steps"),
    "material": (["material", "preview", "{tmp}/material.json", "--out", "{out}", "--size", "big"], "--size"),
    "ntc": (["ntc", "compress", "{tmp}/image.png", "--out", "{out}", "--steps", "1.5"], "--steps"),
    "mipmap": (["mipmap", "{tmp}/base.png", "{tmp}/normal.png", "--out", "{out}", "--levels", "two"], "--levels"),
    "fit": (["fit", "{tmp}/model.gltf", "--out", "{out}", "--epochs", "x"], "--epochs"),
    "simplify": (["simplify", "{tmp}/model.gltf", "--out", "{out}", "--views", "1.5"], "--views"),
    "skin": (["skin", "{tmp}/lod.gltf", "--out", "{out}", "--steps", "x"], "--steps"),
    "lod": (["lod", "{tmp}/model.gltf", "--out", "{out}", "--ratio", "half"], "--ratio"),
    "postfx": (["postfx", "conditions", "{tmp}/render.png", "--out", "{out}", "--size", "3"], "16 to 4096"),
    "service": (["serve", "--data", "{out}", "--port", "eighty"], "--port"),
}


@pytest.mark.parametrize("family", list(_BAD_OPTION_VALUES))
def test_a_bad_option_value_is_one_error_line_naming_the_option(family: str, tmp_path: Path) -> None:
    """``texture infer --size 0x5`` (and a value typer cannot parse or that is out of its range, in every command family)
    printed a boxed usage message; it is one ``error:`` line naming the option and the fix, exit code 2, like any bad input."""
    argv, expect = _BAD_OPTION_VALUES[family]
    out = tmp_path / "out"
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{out}", str(out)) for a in argv]
    _check_refusal(argv, out, expect, 2, [])
    code, output, _ = _run(argv)
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --") and "Fix:" in lines[0], output


def test_a_missing_argument_keeps_its_usage_text(tmp_path: Path) -> None:
    code, output, _ = _run(["mipmap", str(tmp_path / "base.png"), "--out", str(tmp_path / "out")])
    assert code == 2 and "Missing argument" in output and "Usage:" in output


# --- a refused bake on a finished bake's folder -----------------------------------------------------


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_refused_bake_on_a_finished_bakes_folder_changes_nothing_and_resume_works(tmp_path: Path) -> None:
    """A texture bake of a PNG whose header says 100000x100000 is refused at loading; on a folder that held a finished bake
    it deleted that bake's checkpoint (.neuralbake/checkpoints/train.pt), so the next --resume had nothing to resume from."""
    from tests.data.make_bad_inputs import _png

    image = Path(__file__).resolve().parents[2] / "examples/neural_texture/grace_hopper_256.png"
    huge = tmp_path / "huge.png"
    huge.write_bytes(_png(100_000, 100_000))
    out = tmp_path / "out"
    def bake(source: Path, steps: int = 5, *extra: str) -> tuple[int, str]:
        argv = ["texture", "bake", str(source), "--out", str(out), "--size", "16x16", "--steps", str(steps), "--precision", "fp32",
                "--device", "cpu", "-q"]
        code, output, _ = _run([*argv, *extra])
        return code, output

    code, output = bake(image)
    assert code == 0, output
    before = _tree(out)
    assert ".neuralbake/checkpoints/train.pt" in before
    code, output = bake(huge)
    assert code == 2 and "100000x100000" in output, output
    assert _tree(out) == before
    code, output = bake(image, 8, "--resume")
    assert code == 0, output
    assert json.loads((out / "report.json").read_text())["resumed"] is True


# --- ntc transcode: a damaged texture.ntc, an unknown format, an output path that is a file -----------------


@pytest.fixture(scope="module")
def ntc_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny NTC folder (16x16 base colour, a few steps) for the transcode cases."""
    from PIL import Image

    from neuralbake.bakes.ntc import NTCConfig, compress_texture_set
    from neuralbake.nn.trainer import TrainerConfig

    root = tmp_path_factory.mktemp("ntc")
    image = root / "base.png"
    Image.fromarray((np.random.default_rng(0).random((16, 16, 3)) * 255).astype(np.uint8)).save(image)
    config = NTCConfig(sources=[f"base_color={image}"], bpp=[40.0], hidden=(8,), pe_frequencies=1, batch_size=128, finetune_steps=2, baselines=False,
                       device="cpu", train=TrainerConfig(steps=5, precision="fp32", eval_every=0, checkpoint_every=0))
    compress_texture_set(config, root / "ntc", progress=False)
    return root / "ntc"


def _damage_ntc(folder: Path, damage: str) -> None:
    """Truncate or flip a byte of texture.ntc; ``*_resealed`` also rewrites manifest.json and bake.json, so the container's own checks must catch it."""
    import hashlib

    path = folder / "texture.ntc"
    data = bytearray(path.read_bytes())
    if damage.startswith("truncate"):
        data = data[: len(data) - 7]
    else:
        data[20] ^= 0x5A  # inside the JSON header
    path.write_bytes(bytes(data))
    if damage.endswith("resealed"):
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest.update(bytes=len(data), sha256=hashlib.sha256(bytes(data)).hexdigest())
        (folder / "manifest.json").write_text(json.dumps(manifest))
        write_bake_manifest(folder, bake="ntc")


@pytest.mark.parametrize("damage", ["truncate", "flip", "truncate_resealed", "flip_resealed"])
def test_transcode_refuses_a_damaged_ntc(damage: str, ntc_bundle: Path, tmp_path: Path, watch: list[str]) -> None:
    folder = _copy(ntc_bundle, tmp_path)
    _damage_ntc(folder, damage)
    out = tmp_path / "out"
    _check_refusal(["ntc", "transcode", str(folder), "--out", str(out), "--device", "cpu"], out, "texture.ntc", 2, watch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"], "a staging folder was left behind"


@pytest.mark.parametrize(("argv", "expect"), [(["--format", "bc9"], "bc9"), (["--format", "albedo=bc7"], "albedo"), (["--format", "base_color=bc5"], "base_color")])
def test_transcode_refuses_a_bad_format(argv: list[str], expect: str, ntc_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _check_refusal(["ntc", "transcode", str(ntc_bundle), "--out", str(out), "--device", "cpu", *argv], out, expect, 2, [])
    _, output, _ = _run(["ntc", "transcode", str(ntc_bundle), "--out", str(out), "--device", "cpu", *argv])
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --format") and "Fix:" in lines[0], output


def test_transcode_refuses_an_out_that_is_a_file(ntc_bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "taken.dds"
    target.write_bytes(b"keep me")
    code, output, exception = _run(["ntc", "transcode", str(ntc_bundle), "--out", str(target), "--device", "cpu"])
    assert exception is None or isinstance(exception, SystemExit), output
    flat = " ".join(output.split())
    assert code == 2 and flat.startswith("error:") and "taken.dds" in flat and "is a file" in flat and "Fix:" in flat, output
    assert target.read_bytes() == b"keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["taken.dds"]


# --- ntc export: a damaged texture.ntc, an output path that is a file (a missing folder is in the corpus) ------


@pytest.mark.parametrize("damage", ["truncate", "flip", "truncate_resealed", "flip_resealed"])
def test_export_refuses_a_damaged_ntc(damage: str, ntc_bundle: Path, tmp_path: Path, watch: list[str]) -> None:
    folder = _copy(ntc_bundle, tmp_path)
    _damage_ntc(folder, damage)
    out = tmp_path / "out"
    _check_refusal(["ntc", "export", str(folder), "--out", str(out)], out, "texture.ntc", 2, watch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_export_refuses_an_out_that_is_a_file(ntc_bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "taken.slang"
    target.write_bytes(b"keep me")
    code, output, exception = _run(["ntc", "export", str(ntc_bundle), "--out", str(target)])
    assert exception is None or isinstance(exception, SystemExit), output
    flat = " ".join(output.split())
    assert code == 2 and flat.startswith("error:") and "taken.slang" in flat and "is a file" in flat and "Fix:" in flat, output
    assert target.read_bytes() == b"keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["taken.slang"]


def test_export_refuses_a_bad_name(ntc_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _check_refusal(["ntc", "export", str(ntc_bundle), "--out", str(out), "--name", "Crate Set"], out, "--name", 2, [])
