"""The web UI in headless Chromium (Debian's chromium + chromium-driver, driven by selenium): a
user types a token, submits a texture bake from the generated form with an uploaded image, watches
it finish and sees its preview and loss curve."""

from __future__ import annotations

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
