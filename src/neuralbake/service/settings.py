"""How a service instance runs: its data folder, database, address, workers and limits."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ServiceSettings"]


@dataclass
class ServiceSettings:
    """Settings of one ``neuralbake serve``."""

    data: Path
    """Data folder: uploads under ``uploads/``, job outputs under ``jobs/<id>/out``, the SQLite database."""
    db: str = ""
    """SQLAlchemy URL of the job store; empty: ``sqlite:///DATA/service.db``."""
    host: str = "127.0.0.1"
    """Address to listen on (loopback by default: expose it deliberately)."""
    port: int = 8642
    """Port to listen on."""
    workers: int = 1
    """Local worker processes (each runs one bake at a time)."""
    max_upload_bytes: int = 512 * 2**20
    """Largest upload (all its files together, unpacked)."""
    max_request_bytes: int = 2**20
    """Largest JSON request body."""
    max_attempts: int = 3
    """Attempts a job gets when its workers are lost before it fails."""
    lease_seconds: float = 30.0
    """A running job whose worker has not heartbeated this long is requeued."""
    require_token: bool = True
    """Refuse requests without a valid API token (401)."""
    cors_origins: list[str] = field(default_factory=list)
    """Origins allowed to call the API from a browser page; none by default."""
    models: Path | None = None
    """The model library of ``postfx`` jobs (diffusion models, ControlNets, LoRAs), named by path relative to it; ``None``: no such jobs."""
    device: str = "auto"
    """Device the workers run jobs on that leave theirs at ``auto`` (auto: a GPU if this machine has one)."""
    job_memory: int | None = None
    """Memory one job may need, in bytes, checked against its footprint before it is queued; ``None``:
    the workers' device's memory (the GPU's, else this machine's RAM) shared among the local workers."""
    max_steps: int = 10_000_000
    """Most training steps one job may ask for (ten times the largest device default, the neural texture's million on a GPU)."""

    def worker_device(self) -> str:
        """``cpu`` or ``cuda``: the device a job left at ``auto`` runs on."""
        if self.device != "auto":
            return "cuda" if self.device.startswith("cuda") else "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def job_memory_bytes(self, device_type: str | None = None) -> int | None:
        """What one job may use on ``device_type`` (``cpu``/``cuda``; default: :meth:`worker_device`), see
        :attr:`job_memory`; ``None`` for a GPU this machine does not have (Ray workers elsewhere)."""
        if self.job_memory is not None:
            return self.job_memory
        if (device_type or self.worker_device()) == "cuda":
            import torch

            if not torch.cuda.is_available():
                return None
            total = torch.cuda.get_device_properties(0).total_memory
        else:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(total // max(1, self.workers))

    def database_url(self) -> str:
        """The job store's URL."""
        return self.db or f"sqlite:///{Path(self.data).resolve() / 'service.db'}"
