"""The web UI in headless Chromium (Debian's chromium + chromium-driver, driven by selenium): a
user types a token, submits a texture bake from the generated form with an uploaded image, watches
it finish and sees its preview and loss curve."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ._support import Server

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not CHROMIUM or not DRIVER:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium chromium-driver); the web UI is untested here")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_submit_and_watch_a_bake_from_the_browser(tmp_path: Path, tiny_png: Path, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    server = Server(tmp_path / "data")
    server.start()
    try:
        wait = WebDriverWait(browser, 120)
        browser.get(server.url + "/")
        token = browser.find_element(By.ID, "token")
        token.send_keys(server.token)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", token)
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#kind option[value=texture]")))
        Select(browser.find_element(By.ID, "kind")).select_by_value("texture")
        wait.until(ready.presence_of_element_located((By.ID, "input-image"))).send_keys(str(tiny_png))
        browser.find_element(By.CSS_SELECTOR, "details summary").click()
        for field, value in {"train.steps": "60", "device": "cpu", "batch_size": "64", "network.hidden": "16", "train.precision": "fp32", "train.log_every": "5"}.items():
            element = browser.find_element(By.ID, f"field-{field}")
            browser.execute_script("arguments[0].scrollIntoView(); arguments[0].value = arguments[1]", element, value)
        browser.find_element(By.ID, "submit").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "job-title"), "succeeded"))
        assert browser.find_element(By.ID, "submit-error").text == ""
        preview = wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#pictures img[alt='preview.png']")))
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", preview)
        events = browser.find_element(By.ID, "events").text
        assert " train " in events and " succeeded " in events
        drawn = browser.execute_script("const c = document.getElementById('curve'); return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some(v => v > 0)")
        assert drawn, "the loss curve was not drawn"
        assert "succeeded" in browser.find_element(By.ID, "jobs").text
    finally:
        server.stop()


@pytest.mark.slow
def test_a_wrong_token_shows_the_service_s_message(tmp_path: Path, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    server = Server(tmp_path / "data")
    server.start()
    try:
        browser.get(server.url + "/")
        token = browser.find_element(By.ID, "token")
        token.send_keys("not-a-token")
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", token)
        WebDriverWait(browser, 30).until(ready.text_to_be_present_in_element((By.ID, "jobs-error"), "valid API token"))
    finally:
        server.stop()


def _open_with_token(browser, server, kind: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/")
    token = browser.find_element(By.ID, "token")
    token.send_keys(server.token)
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", token)
    WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.CSS_SELECTOR, f"#kind option[value={kind}]")))
    Select(browser.find_element(By.ID, "kind")).select_by_value(kind)


def _set_fields(browser, values: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, "details summary").click()
    for field, value in values.items():
        element = browser.find_element(By.ID, f"field-{field}")
        browser.execute_script("arguments[0].scrollIntoView(); arguments[0].value = arguments[1]", element, value)


@pytest.mark.slow
def test_watch_a_fit_live_paint_weights_and_see_the_refit_use_them(tmp_path: Path, browser) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    from neuralbake.client import ServiceClient

    crate = Path(__file__).resolve().parents[2] / "examples" / "crate"
    server = Server(tmp_path / "data")
    server.start()
    try:
        wait = WebDriverWait(browser, 180)
        _open_with_token(browser, server, "fit")
        files = sorted(str(p) for p in crate.iterdir() if p.suffix in (".gltf", ".bin", ".png"))
        wait.until(ready.presence_of_element_located((By.ID, "input-asset"))).send_keys("\n".join(files))
        _set_fields(browser, {"render_size": "48", "texture_size": "64", "views": "6", "held_out_views": "2", "epochs": "5000",
                              "environment_samples": "2", "device": "cpu"})
        browser.find_element(By.ID, "submit").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "job-title"), "running"))
        first_job = browser.find_element(By.ID, "job-title").text.split("job ")[1].split(":")[0]

        # the live triptych arrives and is replaced by newer ones as the fit trains
        live = "#live img[data-name='triptych']"
        step_of = lambda: int(browser.execute_script(f"const i = document.querySelector(\"{live}\"); return i && i.complete && i.naturalWidth > 0 ? +i.dataset.step : -1"))
        wait.until(lambda _: step_of() > 0)
        seen = step_of()
        wait.until(lambda _: step_of() > seen)

        # paint a stroke across the middle of the first view and ask for a refit
        canvas = wait.until(ready.visibility_of_element_located((By.ID, "paint-canvas")))
        wait.until(lambda _: browser.execute_script("const i = document.getElementById('paint-image'); return i.complete && i.naturalWidth > 0"))
        browser.execute_script("arguments[0].scrollIntoView()", canvas)
        size = canvas.size
        (ActionChains(browser).move_to_element_with_offset(canvas, -size["width"] // 6, 0).click_and_hold()
         .move_by_offset(size["width"] // 6, size["height"] // 10).move_by_offset(size["width"] // 6, 0).release().perform())
        painted = browser.execute_script("const c = document.getElementById('paint-canvas'); return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.filter((v, i) => i % 4 == 3 && v > 0).length")
        assert painted > 0, "the stroke was not drawn on the canvas"
        browser.find_element(By.ID, "paint-epochs").send_keys("2")
        browser.find_element(By.ID, "paint-refit").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "job-note"), "refit of " + first_job))
        assert browser.find_element(By.ID, "paint-error").text == ""
        wait.until(ready.text_to_be_present_in_element((By.ID, "job-title"), "succeeded"))
        refit_job = browser.find_element(By.ID, "job-title").text.split("job ")[1].split(":")[0]

        client = ServiceClient(server.url, server.token)
        jobs = {job["id"][:8]: job for job in client.jobs()}
        assert jobs[first_job]["status"] == "cancelled"
        refit = jobs[refit_job]
        assert refit["config"]["weights"].endswith("weights.png") and refit["config"]["warm_start"].endswith("fit.pt") and refit["config"]["epochs"] == 2
        report = json.loads(client.file(refit["id"], "report.json"))
        assert report["weighted_pixel_fraction"] > 0 and report["warm_start"]
        client.close()
        # the refit is paintable in turn, and its live picture is shown
        wait.until(ready.visibility_of_element_located((By.ID, "paint-canvas")))
        assert step_of() >= 0
    finally:
        server.stop()
