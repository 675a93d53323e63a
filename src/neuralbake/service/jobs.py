"""Who may do what, and what a job may ask for: the caller's token, and a job's config checked whole.

A :class:`Caller` is the token a request came with. A job belongs to the token that submitted it,
an upload to each token that sent its bytes; a caller sees and acts on its own (an admin token on
all; a server started with ``--no-token`` has one user, who owns everything). :class:`JobConfigs`
turns a request's ``config`` (and ``inputs``, the older spelling of its path fields) into the
config a job stores, with every check a job must pass before it is queued:

1. the path fields confined to the caller's uploads (:mod:`neuralbake.service.paths`);
2. the bake's own typed parse and ``validate()`` (the CLI's messages), on the resolved paths;
3. its :class:`~neuralbake.bakes.run.Footprint` against what a worker can hold (memory) and the
   server's step limit, with the sizes the workers' device would choose.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from typing import Any

from neuralbake.bakes.run import apply_defaults, check_footprint
from neuralbake.core.config import config_from_dict, config_to_dict
from neuralbake.core.paths import path_fields
from neuralbake.errors import ConfigError, NeuralbakeError
from neuralbake.io.manifest import verify_bake_folder
from neuralbake.service.paths import confine_paths, resolve_paths
from neuralbake.service.settings import ServiceSettings
from neuralbake.service.store import JobRecord, Store, TokenRecord
from neuralbake.service.uploads import UploadStore
from neuralbake.service.worker import bake_of, job_folder

__all__ = ["Caller", "JobConfigs", "NotFound"]


class NotFound(NeuralbakeError):
    """No such job or upload for this caller: another token's gets the same answer, so ids cannot be probed."""
    status = 404


@dataclass(frozen=True)
class Caller:
    """The token a request came with (``None``: a server without tokens, one user)."""
    token: TokenRecord | None
    store: Store

    @property
    def token_id(self) -> str | None:
        """The id new jobs and uploads are recorded under."""
        return None if self.token is None else self.token.id

    @property
    def sees_all(self) -> bool:
        """An admin token, or no tokens at all."""
        return self.token is None or self.token.admin

    def owns(self, job: JobRecord | None) -> bool:
        """Whether this caller may see and act on ``job``."""
        return job is not None and (self.sees_all or job.token_id == self.token_id)

    def job(self, job_id: str) -> JobRecord:
        """The caller's job, or :class:`NotFound` (for a missing job and for another token's alike)."""
        job = self.store.get_job(job_id)
        if not self.owns(job):
            raise NotFound(f"there is no job {job_id[:80]!r}.", field="job", fix="list your jobs to find its id.")
        assert job is not None
        return job

    def may_use(self, upload_id: str) -> bool:
        """Whether this caller may read the upload (it sent those bytes)."""
        return self.sees_all or self.store.owns_upload(upload_id, self.token.id)  # type: ignore[union-attr]


class JobConfigs:
    """Requests' configs -> the configs jobs store (see the module docstring)."""
    def __init__(self, store: Store, uploads: UploadStore, settings: ServiceSettings) -> None:
        self.store, self.uploads, self.settings = store, uploads, settings

    def prepare(self, kind: Any, config: Any, inputs: Any, caller: Caller) -> tuple[str, dict[str, Any]]:
        """``(kind, config, inputs)`` of a request -> (kind, the config to store: references, not paths)."""
        bake = bake_of(kind)  # an unknown kind is a ConfigError naming the known ones
        if not isinstance(config, dict) or not isinstance(inputs, dict):
            raise ConfigError("config and inputs must be JSON objects.", field="config", fix='send {"config": {...}, "inputs": {...}}.')
        data = _with_inputs(kind, bake.config_type, config, inputs)
        outputs: dict[str, str] = {}

        def job_outputs(job_id: str, field: str) -> str:
            if job_id not in outputs:
                outputs[job_id] = self._outputs_as_upload(job_id, field, caller)
            return outputs[job_id]

        references = confine_paths(bake.config_type, data, uploads=self.uploads, may_use=caller.may_use, job_outputs=job_outputs,
                                   models=self.settings.models)
        resolved = resolve_paths(bake.config_type, references, uploads=self.uploads, models=self.settings.models)
        parsed = config_from_dict(bake.config_type, resolved, source="the request")
        self._check(bake, parsed)
        return kind, config_to_dict(config_from_dict(bake.config_type, references, source="the request"))

    def _check(self, bake: Any, config: Any) -> None:
        """The bake's own validation, then its footprint, both with the sizes the workers' device picks."""
        import torch


        device = torch.device(self.settings.worker_device())
        trial = copy.deepcopy(config)
        if getattr(trial, "device", None) not in (None, "auto"):
            device = torch.device("cuda" if str(trial.device).startswith("cuda") else "cpu")
        try:
            apply_defaults(bake, trial, device)
            trial.validate()
            limit = self.settings.job_memory_bytes(device.type)
            # No known limit (a GPU job for workers elsewhere, --job-memory unset): its steps are still bounded.
            check_footprint(bake, trial, device, memory_bytes=limit if limit is not None else sys.maxsize, max_steps=self.settings.max_steps)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            # A value of a shape the bake's own checks did not foresee: still the request's fault.
            raise ConfigError(f"the settings cannot be used ({str(exc)[:200]}).", field="config", fix="correct the values named.") from exc

    def _outputs_as_upload(self, job_id: str, field: str, caller: Caller) -> str:
        """A finished job of the caller's: its listed outputs copied into an upload of the caller's; its id."""
        try:
            job = caller.job(job_id)
        except NotFound as exc:
            raise ConfigError(exc.problem, field=f"config.{field}", fix="name a finished job of yours as job:<job id>/<file>.") from exc
        manifest = verify_bake_folder(job_folder(self.settings.data, job.id)) if job.status == "succeeded" else None
        if manifest is None:
            raise ConfigError(f"job {job.id} is {job.status}; it has no finished outputs.", field=f"config.{field}", fix="wait for it to succeed.")
        folder = job_folder(self.settings.data, job.id)
        handles = [(name, open(folder / name, "rb")) for name in manifest["files"]]  # noqa: SIM115 - closed below
        try:
            record = self.uploads.add(handles)
        finally:
            for _, handle in handles:
                handle.close()
        if caller.token_id is not None:
            self.store.add_upload_owner(record.id, caller.token_id)
        return record.id


def _with_inputs(kind: str, config_type: type, config: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each ``inputs`` entry (a path field's dotted name -> reference or list) set in it."""
    fields = {spec.name: spec for spec in path_fields(config_type) if "[]" not in spec.name}
    data = copy.deepcopy(config)
    for name, reference in inputs.items():
        spec = fields.get(name)
        if spec is None:
            raise ConfigError(f"{kind} jobs take no input {str(name)[:80]!r}.", field=f"inputs.{str(name)[:80]}", fix=f"inputs are: {', '.join(fields)}.")
        if spec.many and isinstance(reference, str):
            reference = [reference]
        shape_ok = isinstance(reference, list) and bool(reference) and all(isinstance(r, str) for r in reference) if spec.many else isinstance(reference, str)
        if not shape_ok:
            raise ConfigError("an input is '<upload id>/<file name>'" + (" or a list of them." if spec.many else "."), field=f"inputs.{name}",
                              fix='send e.g. "inputs": {"' + name + '": "<upload id>/<file name>"}.')
        target = data
        *parents, last = name.split(".")
        for part in parents:
            inner = target.get(part)
            if inner is None:
                inner = target[part] = {}
            if not isinstance(inner, dict):
                raise ConfigError(f"config.{part} must be an object to hold inputs.{name}.", field=f"config.{part}", fix="send it as a JSON object.")
            target = inner
        if target.get(last) not in (None, "", []):
            raise ConfigError(f"{name} is given both in config and in inputs.", field=f"inputs.{name}", fix="give it once.")
        target[last] = reference
    return data

