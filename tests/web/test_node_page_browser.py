"""The node page in a real browser: Debian's chromium, headless, driven through
Selenium and Debian's chromedriver (``./scripts/fetch-chromium.sh`` unpacks
both into .tools/chromium; no browser is downloaded by Selenium). On three
scenarios it reads what a person would see: each finding's summary, evidence
and fix, the process rows, points in every chart, runbook links that resolve
on the exporter; it checks that nothing was requested from anywhere but the
exporter on 127.0.0.1, that phone width needs no sideways scrolling and that
dark mode is dark. Screenshots (desktop, phone, dark) go to
$GPU_EXPORTER_SCREENSHOTS, or to a folder under pytest's temporary directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.diagnosis.engine import FINDINGS
from gpu_exporter.diagnosis.evidence import evidence_line
from gpu_exporter.facts.safetext import terminal_safe
from tests.simnode import SimRun
from tests.tools import ROOT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

TOOLS = ROOT / ".tools" / "chromium" / "bin"
DESKTOP = (1280, 900)
PHONE = 390  # CSS pixels, a current phone held upright


def _tool(name: str) -> str:
    path = TOOLS / name
    if path.exists():
        return str(path)
    message = f"{path} not found; ./scripts/fetch-chromium.sh puts it there"
    if os.environ.get("GPU_EXPORTER_REQUIRE_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    options = Options()
    options.binary_location = _tool("chromium")
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless=new",
        # The tests run as root in containers, where chromium's sandbox cannot
        # start; the page is the exporter's own.
        "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
        f"--user-data-dir={profile}", f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
        # Nothing may leave the machine: every name but 127.0.0.1 fails to
        # resolve, and anything not on loopback goes to a proxy that is not there.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1",
        "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-extensions",
        "--disable-default-apps", "--metrics-recording-only", "--mute-audio",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    service = Service(executable_path=_tool("chromedriver"),
                      log_output=str(tmp_path_factory.mktemp("chromedriver") / "log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("GPU_EXPORTER_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        return Path(wanted)
    return tmp_path_factory.mktemp("node-page-screenshots")


def _requested(driver: Any) -> list[str]:
    """Every URL the browser asked for since the log was last read."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _screenshot(driver: Any, path: Path, width: int, mobile: bool, dark: bool) -> None:
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})
    height = DESKTOP[1]
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": min(int(full), 16_000), "deviceScaleFactor": 1,
        "mobile": mobile})
    assert driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def _text(element: Any) -> str:
    return " ".join(element.text.split())


@pytest.mark.parametrize("scenario", ["mixed", "gpu-lost", "fault-driver-not-loaded"])
def test_the_node_page_in_chromium(browser: Any, shots: Path, scenario: str) -> None:
    with SimRun(scenario) as run:
        snap = run.poll(180)
        port = run.serve()
        origin = f"http://127.0.0.1:{port}"
        _requested(browser)  # forget what earlier scenarios loaded
        browser.get(origin + "/")
        assert browser.title.startswith("GPU node")

        findings = snap.derived(FINDINGS) or ()
        for f in findings:
            card = browser.find_element(By.ID, f"gpu-{f.gpu}-{f.row.anchor}")
            text = _text(card)
            assert f.row.summary in text
            assert " ".join(f.row.fix.split()) in text
            explained = {f"explains_{e.row.symptom}_{e.row.cause}" for e in f.explains}
            for key, value in f.evidence.items():
                if key not in explained:
                    assert terminal_safe(evidence_line({key: value})) in text, (key, text)

        processes = snap.readings.processes or []
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.proc")
        assert len(rows) == len(processes)
        shown = {_text(r) for r in rows}
        for p in processes:
            assert any(t.startswith(f"{p.pid} {terminal_safe(p.comm)} ") for t in shown)

        # Every chart drew points; a GPU that answered has all five.
        charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
        gpus = snap.readings.gpus or {}
        assert len(charts) == 5 * len(gpus)
        for chart in charts:
            drawn = browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('polyline.l1, polyline.l2'))"
                ".map(function(p){return p.points.numberOfItems;})", chart)
            assert drawn and max(drawn) >= 2, _text(chart)

        page = _text(browser.find_element(By.TAG_NAME, "body"))
        if scenario == "fault-driver-not-loaded":
            assert "Cannot see the GPUs: NVML is not available" in page
            assert not findings and not charts
        if scenario == "gpu-lost":
            assert "NVML cannot reach this GPU" in page

        # Phone width: everything fits without scrolling sideways.
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        assert browser.execute_script(
            "return document.documentElement.scrollWidth") <= PHONE
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        # Dark mode is dark.
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "dark"}]})
        background = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

        # The top of the page as a person first sees it (the README's picture).
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": DESKTOP[0], "height": 1400, "deviceScaleFactor": 1, "mobile": False})
        assert browser.save_screenshot(str(shots / f"{scenario}-top.png"))
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        _screenshot(browser, shots / f"{scenario}-desktop.png", DESKTOP[0], False, False)
        _screenshot(browser, shots / f"{scenario}-phone.png", PHONE, True, False)
        _screenshot(browser, shots / f"{scenario}-dark.png", DESKTOP[0], False, True)
        for name in ("top", "desktop", "phone", "dark"):
            assert (shots / f"{scenario}-{name}.png").stat().st_size > 5_000

        if scenario == "mixed":
            # The page refreshes itself from the exporter (every 15 s): a new
            # poll's findings appear without a reload.
            # Both forgotten, so only a refresh after this point can bring them back
            # (an earlier one may have run while the checks above took their time).
            browser.execute_script("document.querySelector('main').textContent = 'old';"
                                   "document.getElementById('refreshed').textContent = '';")
            run.poll(1)
            deadline = time.monotonic() + 30
            while "Updated" not in _text(browser.find_element(By.ID, "refreshed")):
                assert time.monotonic() < deadline, "the page never refreshed"
                time.sleep(0.2)
            assert "What is wrong" in _text(browser.find_element(By.TAG_NAME, "main"))

        # Each finding's runbook link resolves to its section on the exporter.
        links = sorted({a.get_attribute("href") for a in
                        browser.find_elements(By.CSS_SELECTOR, "a.runbook")})
        assert len(links) == len({f.row.anchor for f in findings})
        for href in links:
            assert href.startswith(origin + "/runbook#")
            browser.get(href)
            anchor = href.split("#", 1)[1]
            section = browser.find_element(By.ID, anchor)
            assert section.text == anchor

        requested = _requested(browser)
        assert requested, "the performance log recorded nothing"
        outside = [u for u in requested if not u.startswith(origin + "/")]
        assert outside == []


# NVML's driver version buffer holds 80 bytes: a vendor build string can use them all.
LONG_DRIVER = "580.159.04-custom.build.for.a.particular.cluster.with.a.long.suffix-x86_64"


def test_long_strings_wrap_inside_their_card_at_phone_width(browser: Any,
                                                            tmp_path: Path) -> None:
    """A long driver string (one word, no space to break at) stays inside its
    summary card at phone width, and so does everything else on the page."""
    scenario = tmp_path / "long-driver.yaml"
    scenario.write_text(f"name: long-driver\ndescription: 'A vendor build string.'\n"
                        f"extends: mixed\nnode: {{driver_version: {LONG_DRIVER}}}\n")
    with SimRun(str(scenario)) as run:
        run.poll(60)
        port = run.serve()
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        try:
            browser.get(f"http://127.0.0.1:{port}/")
            assert LONG_DRIVER in _text(browser.find_element(By.CSS_SELECTOR, ".summary"))
            # Each box's content fits its box: no text runs past its card's edge.
            spill = browser.execute_script(
                "return Array.from(document.querySelectorAll('.summary div, .summary dd, "
                ".gpu, .gpu>header>*, .facts')).filter(function(e){"
                "return e.scrollWidth > e.clientWidth + 1;})"
                ".map(function(e){return e.className + ' ' + e.textContent.slice(0, 60);})")
            assert spill == []
            assert browser.execute_script(
                "return document.documentElement.scrollWidth") <= PHONE
        finally:
            browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
