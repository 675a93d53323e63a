"""Device run only: one rate of DamagedHelmet's RD curve at the GPU defaults; appends its report to $OUT/rd.jsonl."""
import json, os, sys, time
from pathlib import Path
from neuralbake.bakes.ntc import NTCConfig, compress_texture_set
from neuralbake.core.config import config_from_dict
from neuralbake.io.files import json_safe
bpp = float(sys.argv[1])
cfg = config_from_dict(NTCConfig, {"sources": ["../shared/assets/DamagedHelmet/DamagedHelmet.gltf"], "bpp": [bpp], "device": "cuda"})
t = time.perf_counter(); rep = compress_texture_set(cfg, Path(f"/tmp/rd_{bpp:g}"), progress=False); rep["wall_seconds"] = round(time.perf_counter() - t, 1)
print(bpp, rep["ntc"]["overall_db"], rep["bpp_measured"], rep["train_seconds"], flush=True)
with open(Path(os.environ["OUT"]) / "rd.jsonl", "a") as f:
    f.write(json.dumps(json_safe(rep)) + "\n")
