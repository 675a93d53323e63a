"""Device run only: compress crate and helmet at GPU defaults (+weight_clip), transcode on cuda, time it."""
import json, sys, time, os
from pathlib import Path
from neuralbake.bakes.ntc import NTCConfig, compress_texture_set
from neuralbake.bakes.ntc.transcode import transcode
from neuralbake.core.config import config_from_dict
out = Path(os.environ["OUT"]); DEV = os.environ.get("DEV", "cuda"); EXTRA = json.loads(os.environ.get("EXTRA", "{}"))
sets = {"crate": "examples/crate/crate.gltf", "helmet": "../shared/assets/DamagedHelmet/DamagedHelmet.gltf"}
for name, src in sets.items():
    cfg = config_from_dict(NTCConfig, {"sources": [src], "bpp": [4.0], "device": DEV, "weight_clip": float(sys.argv[1]), **EXTRA})
    folder = Path(f"/tmp/ntc_{name}")
    t = time.perf_counter(); rep = compress_texture_set(cfg, folder, progress=False); wall = time.perf_counter() - t
    row = {"set": name, "compress_wall": round(wall, 1), "psnr": rep["ntc"]["overall_db"], "bpp": rep["bpp_measured"], "train_seconds": rep["train_seconds"], "comparison": rep.get("comparison", {}).get("rows")}
    for fmt in (None, "bc7", "bc1"):
        for rep_i in range(2):  # the second is warm
            o = Path(f"/tmp/tc_{name}_{fmt}_{rep_i}")
            t = time.perf_counter(); r = transcode(folder, o, formats=fmt, device=DEV); w = time.perf_counter() - t
            row[f"transcode_{fmt}_{rep_i}"] = {"wall": round(w, 3), "decode_s": r["decode_seconds"], "encode_s": r["encode_seconds"], "psnr": r["psnr_db"], "bpp": r["bpp"], "plain": r.get("plain_bcn_of_source", {}).get("quality", {}).get("overall_db")}
    print(json.dumps(row), flush=True)
    with open(out / "transcode.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
