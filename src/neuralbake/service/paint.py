"""Interactive fitting: an artist's strokes on a fit's rendered view become the fit's new weights.

A fit job that is watched publishes paintable views (``paint_view`` events): the reference picture
of each of its first held-out views and that view's uv0 buffer (:mod:`neuralbake.render.paint`).
The web UI lets the artist paint over a picture and posts the strokes as a PNG (its alpha, or its
grey level, is the stroke strength) to ``POST /api/jobs/<id>/paint``. :func:`refit_with_strokes`
then

1. projects the strokes through the view's buffer into the job's uv0 weights mask (the job's own
   mask if it had one, else a blank one of :data:`WEIGHTS_SIZE` texels a side), painting or
   erasing;
2. stops the job if it is still running (its trainer saves a checkpoint as it stops) and waits,
   a bounded time, for it to end;
3. stores the new mask, together with the job's latest checkpoint, as one upload (content
   addressed like every upload), and
4. submits a new fit job with the same settings, the new mask as ``weights`` and the checkpoint as
   ``warm_start``: the fit resumes from where it stood, now weighted by the strokes.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neuralbake.errors import InputError
from neuralbake.io.images import load_image
from neuralbake.render.paint import project_strokes
from neuralbake.service.store import TERMINAL_STATES, JobRecord, Store
from neuralbake.service.uploads import UploadStore
from neuralbake.service.worker import job_folder

if TYPE_CHECKING:
    from neuralbake.service.jobs import Caller, JobConfigs

__all__ = ["MAX_STROKE_PIXELS", "WEIGHTS_SIZE", "PaintError", "PaintRequest", "parse_paint_request", "refit_with_strokes"]

WEIGHTS_SIZE = 512
"""Side of a new weights mask (uv0 space), when the job had none."""
MAX_STROKE_PIXELS = 4096 * 4096
"""Largest stroke picture accepted (pixels); strokes are resampled to the view's size anyway."""
STOP_WAIT_SECONDS = 20.0
"""How long a refit waits for a running fit to stop (and save its checkpoint) before using the last one saved."""


class PaintError(InputError):
    """A paint request that cannot be carried out; ``status`` is the HTTP status that says why."""
    def __init__(self, problem: str, *, status: int = 422, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(problem, field=field, fix=fix)
        self.status = status


@dataclass
class PaintRequest:
    """A parsed ``POST /api/jobs/<id>/paint`` body."""
    view: int
    strokes: np.ndarray
    """``[h, w]`` stroke strength in [0, 1]."""
    mode: str = "paint"
    overrides: dict[str, Any] | None = None
    """Settings changed for the refit (e.g. ``{"epochs": 5}``); file fields cannot be changed."""


def _decode_strokes(data: str) -> np.ndarray:
    from PIL import Image

    fix = "send the strokes as a PNG data URL (canvas.toDataURL()) or base64 PNG bytes."
    payload = data.split(",", 1)[1] if data.startswith("data:") else data
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PaintError(f"strokes are not base64 ({exc}).", field="strokes", fix=fix) from exc
    try:
        with Image.open(io.BytesIO(raw)) as image:
            if image.format != "PNG":
                raise PaintError(f"strokes must be a PNG, got {image.format}.", field="strokes", fix=fix)
            if image.width * image.height > MAX_STROKE_PIXELS:
                raise PaintError(f"the stroke picture is {image.width}x{image.height}, larger than allowed.", status=413, field="strokes", fix="send it at the view's size.")
            if "A" in image.getbands():
                array = np.asarray(image.getchannel("A"), np.float32) / 255.0
            else:
                array = np.asarray(image.convert("L"), np.float32) / 255.0
    except PaintError:
        raise
    except Exception as exc:  # Pillow raises many types for damaged images
        raise PaintError(f"the strokes cannot be read as a PNG ({exc}).", field="strokes", fix=fix) from exc
    return array


def parse_paint_request(body: Any) -> PaintRequest:
    """Check a paint request's JSON body: ``{"view": k, "strokes": "<PNG data URL>", "mode": "paint"|"erase", "config": {...}}``."""
    if not isinstance(body, dict):
        raise PaintError("the request body must be a JSON object.", field="body", fix='send {"view": 0, "strokes": "data:image/png;base64,..."}.')
    unknown = sorted(set(body) - {"view", "strokes", "mode", "config"})
    if unknown:
        raise PaintError(f"unknown key {unknown[0]!r} in the paint request.", field=unknown[0], fix="send view, strokes, mode and config.")
    view = body.get("view", 0)
    if isinstance(view, bool) or not isinstance(view, int) or view < 0:
        raise PaintError(f"view must be a held-out view's index (0, 1, ...), got {view!r}.", field="view", fix="send the view of a paint_view event.")
    mode = body.get("mode", "paint")
    if mode not in ("paint", "erase"):
        raise PaintError(f"mode must be paint or erase, got {mode!r}.", field="mode", fix="send paint or erase.")
    strokes = body.get("strokes")
    if not isinstance(strokes, str) or not strokes:
        raise PaintError("no strokes sent.", field="strokes", fix="send the strokes as a PNG data URL.")
    overrides = body.get("config") or {}
    if not isinstance(overrides, dict):
        raise PaintError("config must be a JSON object of settings to change.", field="config", fix='send e.g. {"epochs": 5}.')
    for name in ("asset", "weights", "warm_start"):
        if name in overrides:
            raise PaintError(f"a refit keeps the job's {name}; it cannot be changed here.", field=f"config.{name}", fix="submit a new job instead.")
    return PaintRequest(view=view, strokes=_decode_strokes(strokes), mode=mode, overrides=overrides)


def _load_view(folder: Path, view: int) -> dict[str, np.ndarray]:
    path = folder / ".neuralbake" / "previews" / f"view{view}.npz"
    if not path.is_file() or path.is_symlink():
        raise PaintError(
            f"the job has published no paintable view {view}.",
            status=409,
            field="view",
            fix="wait for the fit's paint_view events (a running or finished fit with uv0), and paint one of those views.",
        )
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in ("pixel", "uv", "uv_dx", "uv_dy", "size")}


def _current_weights(job: JobRecord, uploads: UploadStore) -> np.ndarray:

    reference = job.config.get("weights")
    if not reference:
        return np.zeros((WEIGHTS_SIZE, WEIGHTS_SIZE), np.float32)
    image, _ = load_image(uploads.resolve(reference, field="weights"))
    return (image[..., :3].mean(-1) if image.shape[2] >= 3 else image[..., 0]).astype(np.float32)


def _png_bytes(mask: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.round(np.clip(mask, 0.0, 1.0) * 255.0).astype(np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _wait_until_stopped(store: Store, job: JobRecord, timeout: float) -> JobRecord:
    if job.status in TERMINAL_STATES:
        return job
    store.request_cancel(job.id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = store.get_job(job.id)
        if current is None or current.status in TERMINAL_STATES:
            return current or job
        time.sleep(0.2)
    return store.get_job(job.id) or job


def refit_with_strokes(
    store: Store, uploads: UploadStore, configs: JobConfigs, data: Path, job: JobRecord, request: PaintRequest, *, caller: Caller,
    max_attempts: int, stop_wait: float = STOP_WAIT_SECONDS,
) -> dict[str, Any]:
    """Carry out a paint request on fit ``job`` (the caller's; see the module docstring); return the
    new job (the caller's too) and what was painted."""

    if job.kind != "fit":
        raise PaintError(f"only fit jobs take painted weights; this is a {job.kind} job.", status=409, field="job", fix="paint on a fit job.")
    folder = job_folder(data, job.id)
    buffer = _load_view(folder, request.view)
    mask, texels = project_strokes(buffer, request.strokes, _current_weights(job, uploads), mode=request.mode)
    if texels == 0:
        raise PaintError("the strokes touch no part of the asset in that view.", field="strokes", fix="paint over the asset, not the background.")
    job = _wait_until_stopped(store, job, stop_wait)
    files: list[tuple[str, Any]] = [("weights.png", io.BytesIO(_png_bytes(mask)))]
    checkpoint = folder / ".neuralbake" / "checkpoints" / "fit.pt"
    if checkpoint.is_file() and not checkpoint.is_symlink():
        files.append(("fit.pt", open(checkpoint, "rb")))  # noqa: SIM115  (closed below)
    try:
        upload = uploads.add(files)
    finally:
        for _, handle in files:
            handle.close()
    if caller.token_id is not None:
        store.add_upload_owner(upload.id, caller.token_id)
    settings = {key: value for key, value in job.config.items() if key not in ("weights", "warm_start")}
    for key, value in (request.overrides or {}).items():
        settings[key] = value
    settings["weights"] = f"{upload.id}/weights.png"
    if "fit.pt" in upload.files:
        settings["warm_start"] = f"{upload.id}/fit.pt"
    # The same checks as any submitted job: the overrides' paths confined, the bake's validation, the footprint.
    kind, config = configs.prepare("fit", settings, {}, caller)
    new = store.create_job(kind, config, token_id=caller.token_id, max_attempts=max_attempts, quota=caller.token.quota_jobs if caller.token else None)
    store.add_event(job.id, "refit", {"job": new.id, "view": request.view, "mode": request.mode, "painted_texels": texels})
    return {
        "job": new.to_json(),
        "from_job": job.id,
        "weights": f"{upload.id}/weights.png",
        "warm_start": f"{upload.id}/fit.pt" if "fit.pt" in upload.files else None,
        "painted_texels": texels,
        "weights_size": list(mask.shape),
    }
