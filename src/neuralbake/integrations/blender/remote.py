"""The AI pass on a neuralbake server: the render (one multilayer OpenEXR, or a folder of them for an
animation) is uploaded, a ``postfx`` job runs there, and its files come back, all through
:class:`neuralbake.client.ServiceClient` (the zip carries a copy of it; it needs only Python's own
``urllib``). Model, ControlNet and LoRA paths are then names in the server's ``--models`` library."""

from __future__ import annotations

import json
import os

from neuralbake.client import ServiceClient, ServiceError


def library_name(path: str) -> str:
    """On a server, a model path is a name in its library: the text as typed, without Blender's // prefix or a trailing slash."""
    return path[2:].rstrip("/\\") if path.startswith("//") else path.rstrip("/\\")


def run_on_server(server: str, token: str, render: str, out: str, config: dict, pass_fields: list[str], *, motion: bool) -> dict:
    """Run the chain with ``config`` (the panel's settings) on ``render`` at ``server`` and download the job's files into ``out``;
    ``pass_fields`` (depth, normal, ids) and ``motion`` read their passes from the same EXR files. Returns the job's report."""
    client = ServiceClient(server, token)
    sequence = os.path.isdir(render)
    try:
        if sequence:  # the frames go up as one upload, in a folder the job names
            frames = [os.path.join(render, f) for f in sorted(os.listdir(render)) if f.lower().endswith(".exr")]
            upload = client.upload(frames, base=os.path.dirname(os.path.abspath(render)))
        else:
            upload = client.upload([render])
        ref = f"{upload['id']}/{os.path.basename(os.path.abspath(render))}"
        inputs = {"render": ref, **{name: ref for name in pass_fields}}
        if sequence and motion:
            inputs["motion"] = ref
        config = {k: v for k, v in config.items() if k != "device"}  # the server's workers pick their own
        job = client.wait(client.submit("postfx", config, inputs)["id"])
        if job["status"] != "succeeded":
            raise RuntimeError(f"the server's job {job['id']} {job['status']}: {job.get('error') or ''}")
        client.fetch(job["id"], out)
    except ServiceError as exc:
        raise RuntimeError(f"the server refused the request{f' ({exc.status})' if exc.status else ''}: {exc}") from None
    finally:
        client.close()
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    report["server_job"] = job["id"]
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)  # the local copy says which server job made it
    return report
