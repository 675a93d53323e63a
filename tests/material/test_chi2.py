"""Chi-square tests: each lobe's sampler draws directions with exactly the density its ``pdf``
reports (histogram over (cos theta, phi) cells against the integrated pdf, fixed seeds)."""

from __future__ import annotations

import pytest

from neuralbake.material import LOBES

from ._support import chi2_sampler_pvalue, direction, lobe_cases

pytest.importorskip("scipy", reason="scipy is needed for the chi-square p-value (pip install scipy)")

CASES = lobe_cases()


@pytest.mark.parametrize("cos_o", [0.9, 0.35])
@pytest.mark.parametrize(("case", "lobe", "params"), CASES, ids=[c[0] for c in CASES])
def test_sampler_matches_pdf(case: str, lobe: str, params: dict, cos_o: float) -> None:
    wo = direction(cos_o, phi=0.7)
    p_value = chi2_sampler_pvalue(
        lambda w, u: LOBES[lobe].sample(w, u, params),
        lambda wi, w: LOBES[lobe].pdf(wi, w, params),
        wo,
        seed=17,
    )
    assert p_value > 0.01, f"{case} at cos_o={cos_o}: p = {p_value:.3g}"


def test_chi2_detects_a_wrong_pdf() -> None:
    # Guard the guard: claiming the cosine density for GGX samples must fail.
    params = {"eta": 1.0, "k": 3.0, "alpha_x": 0.3}
    p_value = chi2_sampler_pvalue(
        lambda w, u: LOBES["conductor"].sample(w, u, params),
        lambda wi, w: LOBES["lambert"].pdf(wi, w, {}),
        direction(0.8),
        seed=17,
    )
    assert p_value < 1e-6
