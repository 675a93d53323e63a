"""Take the README's screenshots of the service's web UI (headless Chromium, as the browser tests).

    python docs/screenshots.py [--asset PATH.gltf] [--out docs/images]

Starts `neuralbake serve` on a free loopback port with a fresh data folder, submits a fit of the
asset (default: the crate in examples/) from the UI, waits for the live triptych, paints a stroke
on the first paintable view, asks for the refit and photographs the page at each stage:
``service_ui.png`` (the whole page while the fit runs), ``service_paint.png`` (the paint panel with
the stroke) and ``service_refit.png`` (the refit running with its live picture). Needs Debian's
chromium + chromium-driver and selenium.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asset", type=Path, default=ROOT / "examples" / "crate" / "crate.gltf")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--render-size", default="192")
    args = parser.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    data = Path(tempfile.mkdtemp(prefix="neuralbake-shots-"))
    port = _free_port()
    made = subprocess.run([sys.executable, "-m", "neuralbake", "token", "create", "docs", "--data", str(data)], capture_output=True, text=True, check=True)
    token = made.stdout.strip().splitlines()[-1].strip()
    server = subprocess.Popen([sys.executable, "-m", "neuralbake", "serve", "--data", str(data), "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1050", "--hide-scrollbars"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)
    try:
        wait = WebDriverWait(browser, 600)
        for _ in range(100):
            try:
                browser.get(f"http://127.0.0.1:{port}/")
                break
            except Exception:  # noqa: BLE001  (the server is still starting)
                time.sleep(0.3)
        field = browser.find_element(By.ID, "token")
        field.send_keys(token)
        browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
        wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#kind option[value=fit]")))
        Select(browser.find_element(By.ID, "kind")).select_by_value("fit")
        folder = args.asset.resolve().parent
        files = sorted(str(p) for p in folder.rglob("*") if p.suffix.lower() in (".gltf", ".bin", ".png", ".jpg", ".jpeg"))
        wait.until(ready.presence_of_element_located((By.ID, "input-asset"))).send_keys("\n".join(files))
        browser.find_element(By.CSS_SELECTOR, "details summary").click()
        settings = {"render_size": args.render_size, "texture_size": "512", "views": "16", "held_out_views": "2", "epochs": "2000", "environment_samples": "4"}
        for name, value in settings.items():
            element = browser.find_element(By.ID, f"field-{name}")
            browser.execute_script("arguments[0].value = arguments[1]", element, value)
        browser.find_element(By.CSS_SELECTOR, "details summary").click()
        browser.find_element(By.ID, "submit").click()
        step = "const i = document.querySelector(\"#live img[data-name='triptych']\"); return i && i.complete && i.naturalWidth > 0 ? +i.dataset.step : -1"
        wait.until(lambda _: browser.execute_script(step) >= 64)
        browser.execute_script("window.scrollTo(0, 0)")
        args.out.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(args.out / "service_ui.png"))

        canvas = wait.until(ready.visibility_of_element_located((By.ID, "paint-canvas")))
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
        width = canvas.size["width"]
        (ActionChains(browser).move_to_element_with_offset(canvas, -width // 5, -width // 12).click_and_hold()
         .move_by_offset(width // 8, width // 16).move_by_offset(width // 8, -width // 24).move_by_offset(width // 8, width // 24).release().perform())
        browser.find_element(By.ID, "paint-epochs").send_keys("200")
        browser.find_element(By.ID, "paint").screenshot(str(args.out / "service_paint.png"))
        browser.find_element(By.ID, "paint-refit").click()
        wait.until(ready.text_to_be_present_in_element((By.ID, "job-note"), "refit of"))
        wait.until(lambda _: browser.execute_script(step) >= 32)
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(args.out / "service_refit.png"))
        print(f"wrote service_ui.png, service_paint.png and service_refit.png to {args.out}")
    finally:
        browser.quit()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
