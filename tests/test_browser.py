"""What a student sees opening each notebook in JupyterLab from a fresh clone, in a real browser.

A JupyterLab server runs on a temporary copy of notebooks/ with empty Jupyter and IPython
settings, so the notebooks are untrusted, as in every fresh clone: JupyterLab strips scripts from
stored HTML and shows a stored widget as its `text/plain`. Debian's headless Chromium, driven by
Playwright at a 1366x768 laptop size, opens every notebook and checks that no stored output shows
a broken image, an "Error displaying widget" or a progress bar stuck at 0, that nothing loads an
asset from the internet (the course must work offline), and that the Snake player runs, answers a
click and fits the screen together with its buttons.

Without Chromium or the playwright package these tests are skipped with the reason, except where
CI_REQUIRE_BROWSER=1 (.ci/run sets it): there they fail, so CI cannot skip them silently.
"""

import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

nbformat = pytest.importorskip("nbformat", reason="the browser tests read the notebooks with nbformat (dev extras)")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [path.name for path in NOTEBOOKS]
CHROMIUM = Path("/usr/bin/chromium")
# Headless in a container (root, no GPU), and nothing of Chromium's own that calls home.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1366, "height": 768}  # a common laptop screen
PLAYER_NOTEBOOK = ROOT / "notebooks" / "01_cpu_snake.ipynb"
TIMEOUT_MS = 60_000  # any wait in the page: JupyterLab loading, a notebook rendering
RUN_TIMEOUT_MS = 120_000  # running the notebook's first cells (imports torch) in a fresh kernel

# The end of a tqdm meter: the count done, with "/total" or a unit, then "[elapsed<..." or "[elapsed,",
# as in "naive DQN:   0%|          | 0/2000 [00:00<?, ?step/s]" or "naive DQN: 0step [00:00, ?step/s]".
PROGRESS_COUNT = re.compile(r"(?<!\S)(\d+(?:\.\d+)?)\S* \[(?:\d+:)?\d+:\d\d[<,\]]")
STATUS = re.compile(r"^Score \d+ \| Length \d+ \| ")  # the player's label, "Score 0 | Length 3 | playing"


def missing_browser() -> list[str]:
    """What this machine lacks to run the browser tests (nothing: an empty list)."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (Debian: apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install playwright)")
    return missing


def require_browser() -> None:
    """Skip without a browser to drive, or fail instead where CI_REQUIRE_BROWSER=1."""
    missing = missing_browser()
    if not missing:
        return
    reason = "the browser tests need " + " and ".join(missing)
    if os.environ.get("CI_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}; CI_REQUIRE_BROWSER=1 forbids skipping them", pytrace=False)
    pytest.skip(reason)


def test_without_a_browser_the_tests_skip_except_where_ci_requires_them(monkeypatch):
    """The skip is for a developer's machine; in CI a missing browser is a failure."""
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.delenv("CI_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="/nonexistent/chromium"):
        require_browser()
    monkeypatch.setenv("CI_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="CI_REQUIRE_BROWSER=1 forbids skipping"):
        require_browser()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory) -> Path:
    """A copy of notebooks/ as a fresh clone has it, for JupyterLab to open (and the tests to read)."""
    require_browser()
    copy = tmp_path_factory.mktemp("clone") / "notebooks"
    shutil.copytree(ROOT / "notebooks", copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "runs"))
    return copy


@pytest.fixture(scope="module")
def lab(notebooks, tmp_path_factory):
    """A JupyterLab server on the copy, with settings as in a fresh clone; yields its URL with the token."""
    tmp = tmp_path_factory.mktemp("lab")
    env = dict(os.environ, RLGPU_QUICK="1")
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        (tmp / name).mkdir()
        env[name] = str(tmp / name)  # no trusted-notebook database, no settings, no workspace
    port, token = free_port(), secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}"
    log_path = tmp / "jupyter.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={notebooks}",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: open notebooks, run cells
    with log_path.open("w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_server(server, url, token, log_path)
        yield f"{url}/lab?token={token}"
    finally:
        stop_server(server, url, token)


def wait_for_server(server, url: str, token: str, log_path: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited with {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"jupyter lab did not answer within {TIMEOUT_MS / 1000:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop_server(server, url: str, token: str) -> None:
    """Ask the server to shut down with its kernels; kill its process group if it does not."""
    if server.poll() is None:
        try:
            request = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                             headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(request, timeout=10)
            server.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def page(lab):
    """JupyterLab loaded in headless Chromium at laptop size."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(lab)
            page.wait_for_function("() => window.jupyterapp !== undefined")
            page.evaluate("() => window.jupyterapp.restored")
            yield page
        finally:
            browser.close()


# The notebook is the current widget of JupyterLab's main area from the moment it is opened. It has
# rendered when every cell shows its outputs or its rendered Markdown (JupyterLab first puts
# placeholders for the cells out of view, and fills them in later) and every image has loaded.
RENDERED = """path => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== path || !panel.context.isReady) return false;
    const cells = panel.content.widgets;
    const shown = cell => cell.model.type === "code"
        ? cell.node.contains(cell.outputArea.node) && cell.outputArea.widgets.length === cell.model.outputs.length
        : cell.model.type !== "markdown" || cell.node.querySelector(".jp-RenderedMarkdown") !== null;
    return cells.length === panel.content.model.cells.length && cells.every(shown)
        && [...panel.node.querySelectorAll("img")].every(img => img.complete);
}"""


@contextmanager
def opened(page, path: Path):
    """Open a notebook as a student does and wait until all of it has rendered; yields the panel's DOM id.

    Closes it after, with its kernel.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate("path => window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'})"
                  " .then(() => undefined)", path.name)
    try:
        try:
            page.wait_for_function(RENDERED, arg=path.name, polling=200)
        except PlaywrightTimeout:
            pytest.fail(f"{path.name}: JupyterLab did not show all its cells, outputs and images within"
                        f" {TIMEOUT_MS // 1000} s", pytrace=False)
        yield page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    finally:
        page.evaluate("""async () => {
            const panel = window.jupyterapp.shell.currentWidget;
            await panel.sessionContext.shutdown();
            panel.dispose();  // closes the tab without asking to save the cells run here
        }""")


# Per cell, what the student sees: the text of each output, the images that did not load (their src,
# cut short), the URLs of elements that load something from another host, and the collapsed blocks
# (<details> with a <summary>, the exercises' solutions) its Markdown renders.
INSPECT = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const loads = "[src], link[href], object[data]";
    const external = url => /^https?:/i.test(url) && new URL(url).host !== location.host;
    return panel.content.widgets.map(cell => ({
        outputs: cell.model.type !== "code" ? [] : [...cell.outputArea.node.querySelectorAll(
            ".jp-OutputArea-output")].map(output => output.textContent),
        broken: [...cell.node.querySelectorAll("img")].filter(img => img.naturalWidth === 0).map(
            img => (img.getAttribute("src") || "").slice(0, 60)),
        external: [...cell.node.querySelectorAll(loads)].map(el => el.src || el.href || el.data).filter(external),
        solutions: cell.model.type !== "markdown" ? 0 : cell.node.querySelectorAll(
            ".jp-RenderedMarkdown details > summary").length,
    }));
}"""


class ExternalAssets(HTMLParser):
    """The http(s) URLs some HTML would load (src of any element, href of <link>), not its hyperlinks."""

    def __init__(self, markup: str):
        super().__init__()
        self.urls = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            loads = name == "src" or (tag == "link" and name == "href") or (tag == "object" and name == "data")
            if loads and re.match(r"(https?:)?//", value or "", flags=re.IGNORECASE):
                self.urls.append(value)


def cell_name(path: Path, notebook, index: int) -> str:
    """"01_cpu_snake.ipynb cell 12 (In [6])": the index counts every cell from 0, In [n] is the prompt."""
    count = notebook.cells[index].get("execution_count")
    return f"{path.name} cell {index}" + (f" (In [{count}])" if count else "")


def stored_problems(notebook) -> list[tuple[int, str]]:
    """(cell index, problem) for each stored output that loads an asset from the internet.

    Checked in the file, because JupyterLab drops <script> and <link> from an untrusted notebook's
    outputs but loads them once the student trusts it.
    """
    problems = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            for mime in ("text/html", "image/svg+xml", "text/markdown"):
                for url in ExternalAssets(str(output.get("data", {}).get(mime, ""))).urls:
                    problems.append((index, f"stored {mime} output loads {url} from the internet (fails offline)"))
    return problems


def rendered_problems(cells, notebook) -> list[tuple[int, str]]:
    """(cell index, problem) for what is wrong in the rendered cells (INSPECT's findings)."""
    problems = []
    for index, cell in enumerate(cells):
        written = notebook.cells[index].source.count("<details>") if notebook.cells[index].cell_type == "markdown" else 0
        if cell["solutions"] != written:
            problems.append((index, f"{written} collapsed <details> blocks written, {cell['solutions']} rendered"))
        problems += [(index, f"broken image: <img src={src!r}...> did not load" if src else
                      "broken image: an <img> without src") for src in cell["broken"]]
        problems += [(index, f"an element loads {url} from the internet (fails offline)") for url in cell["external"]]
        for text in cell["outputs"]:
            if "Error displaying widget" in text:
                problems.append((index, f"shows {text.strip()!r}"))
            for line in text.splitlines():
                count = PROGRESS_COUNT.search(line)
                if count and float(count.group(1)) == 0:
                    problems.append((index, f"progress bar shows {line.strip()!r}: the bar as it was created, "
                                            + "not as the finished run left it"))
    return problems


@pytest.mark.browser
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_a_student_sees_every_stored_output_intact(page, notebooks, path):
    """Images load, widgets and progress bars show their final state, nothing comes from the internet,
    and each exercise's collapsed solution renders as a <details> block (the sanitizer keeps it).

    A progress bar in the stored outputs belongs to a loop that finished (stored outputs come from a
    run in which no cell raised, see test_notebooks.py), so one that shows 0 done is stale.
    """
    notebook = nbformat.read(notebooks / path.name, as_version=4)
    requested = []

    def record(request):
        requested.append(request.url)

    page.on("request", record)
    try:
        with opened(page, path):
            cells = page.evaluate(INSPECT)
    finally:
        page.remove_listener("request", record)
    assert len(cells) == len(notebook.cells), f"{path.name}: JupyterLab shows {len(cells)} cells"
    problems = [f"{cell_name(path, notebook, index)}: {problem}"
                for index, problem in sorted(stored_problems(notebook) + rendered_problems(cells, notebook))]
    lab_host = urlsplit(page.url).netloc
    problems += [f"{path.name}: the browser requested {url} (fails offline)" for url in requested
                 if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc != lab_host]
    assert not problems, f"{path.name} in JupyterLab, untrusted:\n" + "\n".join(problems)


def player_cell(notebook) -> int:
    """Index of the cell that shows the Snake player."""
    indices = [index for index, cell in enumerate(notebook.cells)
               if cell.cell_type == "code" and "SnakePlayer(" in cell.source and "display(player)" in cell.source]
    assert indices, f"{PLAYER_NOTEBOOK.name} has no cell with SnakePlayer(...) and display(player)"
    return indices[0]


# Where the board and its buttons are once the student scrolls the board's top to the top of the
# notebook: the notebook's scrolling area, cut to the window, is what they can see.
LAYOUT = """([board, row]) => {
    board.scrollIntoView({block: "start"});
    let area = board.parentElement;
    const scrolls = element => ["auto", "scroll"].includes(getComputedStyle(element).overflowY)
        && element.scrollHeight > element.clientHeight;
    while (area !== document.documentElement && !scrolls(area)) area = area.parentElement;
    const box = element => element.getBoundingClientRect().toJSON();
    const { top, bottom, left, right } = box(area);
    return {natural: [board.naturalWidth, board.naturalHeight], board: box(board), row: box(row),
            visible: {top: Math.max(top, 0), bottom: Math.min(bottom, innerHeight),
                      left: Math.max(left, 0), right: Math.min(right, innerWidth)}};
}"""


@pytest.mark.browser
def test_the_snake_player_answers_a_click_and_fits_a_laptop_screen(page, notebooks):
    """Run the notebook up to the player as a student does, click "Turn right", look at the board.

    Size rule: the board is drawn within 10% of its natural size (width and height). Fit rule: with
    the board's top scrolled to the top of the notebook, the board and the whole row of turn buttons
    lie inside the visible part of the notebook in the 1366x768 window, with no further scrolling.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    notebook = nbformat.read(notebooks / PLAYER_NOTEBOOK.name, as_version=4)
    index = player_cell(notebook)
    where = cell_name(PLAYER_NOTEBOOK, notebook, index)
    with opened(page, PLAYER_NOTEBOOK) as panel_id:
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus === 'idle'")
        page.evaluate("""index => {  // select the cells from the first to the player's, then Run > Run Selected
            const notebook = window.jupyterapp.shell.currentWidget.content;
            notebook.activeCellIndex = 0;
            notebook.extendContiguousSelectionTo(index);
            window.jupyterapp.commands.execute("notebook:run-cell");
        }""", index)
        cell = page.locator(f'[id="{panel_id}"] .jp-Cell').nth(index)
        turn = cell.get_by_role("button", name="Turn right")
        board = cell.locator("img.widget-image")
        try:
            turn.wait_for(timeout=RUN_TIMEOUT_MS)
            page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=board.element_handle())
        except PlaywrightTimeout:
            pytest.fail(f"{where}: no player with a board and a 'Turn right' button after running the cells up to"
                        f" it; the cell shows: {cell.locator('.jp-OutputArea').text_content()!r}")
        expect(cell.locator(".widget-label", has_text=STATUS), f"{where}: the status label").to_be_visible()
        before = board.get_attribute("src")
        turn.click()
        try:
            page.wait_for_function("([img, before]) => img.src !== before", arg=[board.element_handle(), before],
                                   timeout=10_000)
        except PlaywrightTimeout:
            pytest.fail(f"{where}: the board did not change within 10 s of a click on 'Turn right'")
        expect(cell.locator(".widget-label", has_text=STATUS), f"{where}: the status label").to_be_visible()
        assert "Error displaying widget" not in cell.locator(".jp-OutputArea").text_content(), (
            f"{where}: {cell.locator('.jp-OutputArea').text_content()!r}")
        row = cell.locator(".widget-hbox", has=page.get_by_role("button", name="Turn right"))
        layout = page.evaluate(LAYOUT, [board.element_handle(), row.element_handle()])
    (width, height), shown, buttons, visible = (layout[key] for key in ("natural", "board", "row", "visible"))
    assert abs(shown["width"] - width) <= 0.1 * width and abs(shown["height"] - height) <= 0.1 * height, (
        f"{where}: the board is drawn at {shown['width']:.0f}x{shown['height']:.0f} px, its image is"
        f" {width}x{height} px (more than 10% stretched or shrunk)")
    fits = (shown["top"] >= visible["top"] - 1 and buttons["bottom"] <= visible["bottom"] + 1  # 1 px: rounding
            and min(shown["left"], buttons["left"]) >= visible["left"] - 1
            and max(shown["right"], buttons["right"]) <= visible["right"] + 1)
    assert fits, (
        f"{where}: board and buttons do not fit a {VIEWPORT['width']}x{VIEWPORT['height']} screen together:"
        f" with the board's top at the top of the notebook (y={shown['top']:.0f}), the board spans x"
        f" {shown['left']:.0f}-{shown['right']:.0f} and the buttons end at y={buttons['bottom']:.0f},"
        f" x={buttons['right']:.0f}; the notebook shows y {visible['top']:.0f}-{visible['bottom']:.0f},"
        f" x {visible['left']:.0f}-{visible['right']:.0f}")
