"""Environment lighting for the material preview: equirectangular HDR radiance maps, a procedural
default sky, readers for ``.exr`` / ``.hdr`` / PNG maps, and the luminance importance sampler.

Map convention (world up is +y): a map is a float32 tensor ``[H, W, 3]`` of linear RGB radiance.
Row 0 is the zenith (+y) and row ``H - 1`` the nadir; the polar angle is ``theta = pi v`` with
``v = (row + 0.5) / H`` at pixel centres. The column coordinate is ``u = 0.5 + atan2(x, -z) / (2 pi)``,
so the map's centre column looks along -z (away from the preview camera, which sits on +z), and
``u`` grows towards +x. Radiance is piecewise constant per pixel (nearest lookup), which makes the
sampler's density exact.

Sampling (:class:`EnvironmentLight`): pixel ``(i, j)`` gets the weight ``luminance(i, j) sin(theta_i)``
(``sin`` because equal-area pixels near the poles cover less solid angle). A row is drawn from
the marginal CDF over rows, a column from that row's conditional CDF, and the point is placed
uniformly inside the pixel by the leftover of the same uniforms. The density in ``(u, v)`` is
``pmf(i, j) H W``; in solid angle it is that over ``2 pi^2 sin(theta)`` (the Jacobian of the map).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from neuralbake.errors import InputError
from neuralbake.io.images import load_image
from neuralbake.material.texture import srgb_to_linear

__all__ = [
    "LUMINANCE_WEIGHTS",
    "EnvironmentLight",
    "as_environment_map",
    "default_environment",
    "direction_to_equirect",
    "equirect_to_direction",
    "load_environment",
    "read_exr",
]

LUMINANCE_WEIGHTS = (0.2126, 0.7152, 0.0722)
"""Rec. 709 / sRGB luminance of linear RGB, the importance the sampler gives each pixel."""

DEFAULT_SUN_ELEVATION_DEG = 35.0
"""Elevation of the default environment's sun above the horizon."""
DEFAULT_SUN_AZIMUTH_DEG = -45.0
"""Azimuth of the default sun, measured from +z (towards the camera) to +x; -45 is front-left."""
DEFAULT_SUN_RADIUS_DEG = 2.5
"""Angular radius of the default sun (widened to one map pixel on coarse maps)."""
DEFAULT_SUN_IRRADIANCE = 3.0
"""Irradiance of the default sun at normal incidence, kept fixed whatever the map resolution."""


def equirect_to_direction(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unit world directions ``[N, 3]`` for map coordinates ``u``, ``v`` (``[N]``, in ``[0, 1]``)."""
    phi = 2.0 * math.pi * (u - 0.5)
    theta = math.pi * v
    s = torch.sin(theta)
    return torch.stack((s * torch.sin(phi), torch.cos(theta), -s * torch.cos(phi)), dim=-1)


def direction_to_equirect(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Map coordinates ``(u, v)``, each ``[N]`` in ``[0, 1]``, of unit world directions ``d`` ``[N, 3]``."""
    u = 0.5 + torch.atan2(d[:, 0], -d[:, 2]) / (2.0 * math.pi)
    v = torch.acos(torch.clamp(d[:, 1], -1.0, 1.0)) / math.pi
    return u, v


def _pixel_centres(height: int, width: int, device: torch.device | str | None) -> torch.Tensor:
    v = (torch.arange(height, dtype=torch.float32, device=device) + 0.5) / height
    u = (torch.arange(width, dtype=torch.float32, device=device) + 0.5) / width
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    return equirect_to_direction(uu.reshape(-1), vv.reshape(-1)).reshape(height, width, 3)


def default_environment(width: int = 256, height: int = 128, *, device: torch.device | str | None = None) -> torch.Tensor:
    """The procedural preview sky, float32 ``[height, width, 3]`` linear radiance.

    * sky (above the horizon): a gradient from a pale horizon ``(0.45, 0.48, 0.52)`` to a blue zenith
      ``(0.12, 0.2, 0.42)``, interpolated by ``sqrt(sin(elevation))``;
    * ground (below): a warm grey ``(0.12, 0.11, 0.09)``, darkening to 70 % at the nadir;
    * sun: a disc of :data:`DEFAULT_SUN_RADIUS_DEG` (at least one pixel wide) at
      :data:`DEFAULT_SUN_ELEVATION_DEG` / :data:`DEFAULT_SUN_AZIMUTH_DEG`, colour ``(1, 0.95, 0.85)``,
      whose radiance is set so that its irradiance is :data:`DEFAULT_SUN_IRRADIANCE` on the map
      actually produced (so lighting does not change with the resolution).
    """
    if width < 4 or height < 2:
        raise InputError(
            f"the environment must be at least 4x2 pixels, got {width}x{height}.", field="width/height", fix="pass a larger size."
        )
    d = _pixel_centres(height, width, device)
    y = d[..., 1:2]
    t = torch.sqrt(torch.clamp(y, 0.0, 1.0))
    horizon = torch.tensor([0.45, 0.48, 0.52], device=d.device)
    zenith = torch.tensor([0.12, 0.2, 0.42], device=d.device)
    ground = torch.tensor([0.12, 0.11, 0.09], device=d.device)
    sky = horizon + t * (zenith - horizon)
    env = torch.where(y >= 0.0, sky, ground * (1.0 + 0.3 * torch.clamp(y, -1.0, 0.0)))
    elev, azim = math.radians(DEFAULT_SUN_ELEVATION_DEG), math.radians(DEFAULT_SUN_AZIMUTH_DEG)
    sun = torch.tensor([math.cos(elev) * math.sin(azim), math.sin(elev), math.cos(elev) * math.cos(azim)], device=d.device)
    radius = max(math.radians(DEFAULT_SUN_RADIUS_DEG), 0.75 * math.pi / height, 1.5 * math.pi / width)
    inside = (d * sun).sum(dim=-1) >= math.cos(radius)
    if not bool(inside.any()):  # the disc fell between pixel centres: light the nearest one
        inside = (d * sun).sum(dim=-1) == (d * sun).sum(dim=-1).max()
    # Solid angle of each pixel: (2 pi / W) (pi / H) sin(theta).
    solid_angle = (2.0 * math.pi / width) * (math.pi / height) * torch.sqrt(torch.clamp(1.0 - y[..., 0] ** 2, min=0.0))
    omega = float((solid_angle * inside).sum())
    colour = torch.tensor([1.0, 0.95, 0.85], device=d.device)
    env = torch.where(inside[..., None], colour * (DEFAULT_SUN_IRRADIANCE / omega), env)
    return env.to(torch.float32).contiguous()


# --- files ------------------------------------------------------------------------------------


def read_exr(path: str | Path) -> np.ndarray:
    """Read the R, G, B channels (or a lone Y channel, as grey) of an EXR file as float32 ``[H, W, 3]``.

    Raises
    ------
    InputError
        Missing, unreadable or corrupt file, or one without R, G and B channels.
    """
    import OpenEXR

    path = Path(path)
    if not path.is_file():
        raise InputError("the file does not exist.", path=path, fix="check the path of the environment map.")
    try:
        with OpenEXR.File(str(path), separate_channels=True) as exr:
            channels = {name: np.asarray(ch.pixels) for name, ch in exr.channels().items()}
    except Exception as exc:  # OpenEXR raises bare RuntimeErrors for every kind of damage
        raise InputError(
            f"this is not a readable OpenEXR file ({exc}).", path=path, fix="re-export the map as an OpenEXR (.exr) file."
        ) from exc
    if "Y" in channels and not any(c in channels for c in "RGB"):  # a luminance-only map is grey
        channels.update({c: channels["Y"] for c in "RGB"})
    missing = [c for c in "RGB" if c not in channels]
    if missing:
        raise InputError(
            f"the EXR has channels {sorted(channels)} but no {', '.join(missing)}.",
            path=path,
            field="channels",
            fix="export an RGB image (R, G and B channels in the default layer).",
        )
    return np.stack([channels[c].astype(np.float32) for c in "RGB"], axis=-1)


def _hdr_fail(path: Path, problem: str) -> InputError:
    return InputError(problem, path=path, fix="re-export the map as a Radiance .hdr (RGBE) or an OpenEXR (.exr) file.")


def _read_hdr(path: Path) -> np.ndarray:
    """Radiance RGBE (``.hdr``) reader: flat and new-style run-length scanlines, ``-Y H +X W`` only."""
    raw = path.read_bytes()
    if not raw.startswith(b"#?"):
        raise _hdr_fail(path, "no Radiance header (the file does not start with '#?').")
    pos = 0
    while True:  # header lines up to a blank line
        end = raw.find(b"\n", pos)
        if end < 0:
            raise _hdr_fail(path, "the header never ends.")
        line, pos = raw[pos:end].strip(), end + 1
        if line.startswith(b"FORMAT=") and line != b"FORMAT=32-bit_rle_rgbe":
            raise _hdr_fail(path, f"unsupported pixel format {line.decode(errors='replace')!r}.")
        if not line:
            break
    end = raw.find(b"\n", pos)
    parts = raw[pos:end].split()
    if len(parts) != 4 or parts[0] != b"-Y" or parts[2] != b"+X":
        raise _hdr_fail(path, f"unsupported resolution line {raw[pos:end][:40]!r} (only '-Y H +X W').")
    height, width = int(parts[1]), int(parts[3])
    data, pos = np.frombuffer(raw, dtype=np.uint8), end + 1
    rgbe = np.empty((height, width, 4), dtype=np.uint8)
    try:
        for row in range(height):
            head = data[pos : pos + 4]
            if 8 <= width < 32768 and head[0] == 2 and head[1] == 2 and (int(head[2]) << 8 | int(head[3])) == width:
                pos += 4
                for channel in range(4):
                    x = 0
                    while x < width:
                        count = int(data[pos])
                        if count > 128:  # a run of one value
                            count -= 128
                            rgbe[row, x : x + count, channel] = data[pos + 1]
                            pos += 2
                        else:  # literal bytes
                            if count == 0:
                                raise ValueError("zero-length run")
                            rgbe[row, x : x + count, channel] = data[pos + 1 : pos + 1 + count]
                            pos += 1 + count
                        x += count
            else:
                rgbe[row] = data[pos : pos + 4 * width].reshape(width, 4)
                pos += 4 * width
    except (ValueError, IndexError) as exc:
        raise _hdr_fail(path, f"the pixel data is damaged or truncated ({exc}).") from exc
    exponent = rgbe[..., 3:4].astype(np.int32)
    scale = np.where(exponent > 0, np.ldexp(1.0, exponent - 136), 0.0)
    return (rgbe[..., :3].astype(np.float64) * scale).astype(np.float32)  # mantissa 2^(e - 136), as stb_image


def load_environment(path: str | Path, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Read an equirectangular environment map as float32 ``[H, W, 3]`` linear radiance.

    ``.exr`` through OpenEXR (R, G, B channels), ``.hdr`` (Radiance RGBE) through a small built-in
    reader, anything else (PNG, JPEG, ...) through :func:`neuralbake.io.images.load_image`, decoded
    from sRGB to linear (alpha dropped, grey repeated to RGB).

    Raises
    ------
    InputError
        A missing, corrupt or unreadable file, or negative / non-finite radiance; the message names
        the file and the fix.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(
            "the environment map does not exist.", path=path, fix="check the path (or pass environment=None for the default sky)."
        )
    suffix = path.suffix.lower()
    if suffix == ".exr":
        array = read_exr(path)
    elif suffix == ".hdr":
        array = _read_hdr(path)
    else:
        image, _ = load_image(path)
        colour = image[..., :3] if image.shape[2] >= 3 else np.repeat(image[..., :1], 3, axis=2)
        array = srgb_to_linear(torch.from_numpy(np.ascontiguousarray(colour))).numpy()
    return as_environment_map(array, source=path, device=device)


def as_environment_map(
    image: torch.Tensor | np.ndarray, *, source: str | Path | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Check an in-memory map and return it as a contiguous float32 ``[H, W, 3]`` tensor on ``device``."""
    t = torch.as_tensor(np.asarray(image) if not isinstance(image, torch.Tensor) else image).to(device=device, dtype=torch.float32)
    where = {"path": source, "field": None if source else "environment"}
    if t.dim() != 3 or t.shape[2] != 3 or t.shape[0] < 2 or t.shape[1] < 2:
        raise InputError(
            f"an environment map must be [H, W, 3] with H, W >= 2, got {tuple(t.shape)}.", fix="pass an RGB equirectangular map.", **where
        )
    if not bool(torch.isfinite(t).all()) or bool((t < 0.0).any()):
        raise InputError("the environment map has negative, NaN or infinite radiance.", fix="clamp the map to finite values >= 0.", **where)
    if not bool((t > 0.0).any()):
        raise InputError("the environment map is black everywhere; it cannot light anything.", fix="pass a map with some light.", **where)
    return t.contiguous()


# --- the light ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class EnvironmentLight:
    """An equirectangular radiance map with its importance sampler (see the module docstring).

    Build with :meth:`from_map`. ``radiance`` ``[H, W, 3]``; ``pmf`` ``[H, W]`` (sums to 1);
    ``marginal_cdf`` ``[H]`` and ``conditional_cdf`` ``[H, W]`` (inclusive, last entry 1).
    """

    radiance: torch.Tensor
    pmf: torch.Tensor
    marginal_cdf: torch.Tensor
    conditional_cdf: torch.Tensor

    @classmethod
    def from_map(cls, radiance: torch.Tensor | np.ndarray) -> EnvironmentLight:
        """Build the sampler for a ``[H, W, 3]`` map (checked with :func:`as_environment_map`)."""
        env = as_environment_map(radiance, device=radiance.device if isinstance(radiance, torch.Tensor) else None)
        height = env.shape[0]
        lum = (env.double() * torch.tensor(LUMINANCE_WEIGHTS, dtype=torch.float64, device=env.device)).sum(dim=-1)
        sin_theta = torch.sin(math.pi * (torch.arange(height, dtype=torch.float64, device=env.device) + 0.5) / height)
        weight = lum * sin_theta[:, None]
        pmf = weight / weight.sum()
        row_mass = pmf.sum(dim=1)
        marginal = torch.cumsum(row_mass, 0)
        conditional = torch.cumsum(pmf, 1) / torch.where(row_mass > 0, row_mass, torch.ones_like(row_mass))[:, None]
        marginal[-1] = 1.0
        conditional[:, -1] = 1.0
        return cls(env, pmf.float(), marginal.float(), conditional.float())

    @property
    def height(self) -> int:
        """Map rows."""
        return self.radiance.shape[0]

    @property
    def width(self) -> int:
        """Map columns."""
        return self.radiance.shape[1]

    def _pixel(self, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u, v = direction_to_equirect(d)
        col = torch.clamp((u * self.width).long(), 0, self.width - 1)
        row = torch.clamp((v * self.height).long(), 0, self.height - 1)
        return row, col

    def _solid_angle_pdf(self, pmf: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        sin_theta = torch.sqrt(torch.clamp(d[:, 0] ** 2 + d[:, 2] ** 2, min=0.0))
        density = pmf * (self.height * self.width) / (2.0 * math.pi * math.pi)
        return torch.where(sin_theta > 1e-7, density / torch.clamp(sin_theta, min=1e-7), torch.zeros_like(sin_theta))

    def eval(self, d: torch.Tensor) -> torch.Tensor:
        """Radiance arriving from world directions ``d`` ``[N, 3]`` (nearest pixel), ``[N, 3]``."""
        row, col = self._pixel(d)
        return self.radiance[row, col]

    def pdf(self, d: torch.Tensor) -> torch.Tensor:
        """Solid-angle density of :meth:`sample` at world directions ``d`` ``[N, 3]``, ``[N]``."""
        row, col = self._pixel(d)
        return self._solid_angle_pdf(self.pmf[row, col], d)

    def sample(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World directions ``[N, 3]`` and their solid-angle pdf ``[N]`` from uniforms ``u`` ``[N, 2]``.

        ``u[:, 0]`` picks the row and its position inside the row, ``u[:, 1]`` the column and the
        position inside the column, so the map is inverted continuously.
        """
        u = u.to(self.pmf)
        h, w = self.height, self.width
        row = torch.clamp(torch.searchsorted(self.marginal_cdf, u[:, 0:1].contiguous(), right=True)[:, 0], max=h - 1)
        cdf_rows = self.conditional_cdf[row]
        col = torch.clamp(torch.searchsorted(cdf_rows, u[:, 1:2].contiguous(), right=True)[:, 0], max=w - 1)
        lo_r = torch.where(row > 0, self.marginal_cdf[torch.clamp(row - 1, min=0)], torch.zeros_like(u[:, 0]))
        hi_r = self.marginal_cdf[row]
        lo_c = torch.where(col > 0, cdf_rows.gather(1, torch.clamp(col - 1, min=0)[:, None])[:, 0], torch.zeros_like(u[:, 0]))
        hi_c = cdf_rows.gather(1, col[:, None])[:, 0]
        below = 1.0 - torch.finfo(u.dtype).eps
        dv = torch.clamp((u[:, 0] - lo_r) / torch.clamp(hi_r - lo_r, min=1e-30), 0.0, below)
        du = torch.clamp((u[:, 1] - lo_c) / torch.clamp(hi_c - lo_c, min=1e-30), 0.0, below)
        d = equirect_to_direction((col + du) / w, (row + dv) / h)
        return d, self._solid_angle_pdf(self.pmf[row, col], d)
