"""advise where people work: `advise profile notebook.ipynb` (advisor/notebook.py), and the Python API
(advisor/api.py) executed in a real Jupyter kernel (nbclient), its inline page read in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from conftest import WORKLOADS, advise_cmd
from test_html import browser, open_page  # noqa: F401  (the module-scoped headless Chromium)

QUICK = ["--steps", "10", "--warmup", "2", "--profile-steps", "3"]

STARVED = (WORKLOADS / "starved_io.py").read_text().split('if __name__ == "__main__":')[0]
CELLS = [
    ("markdown", "# A starved loader, as a notebook"),
    ("code", "%matplotlib inline\n!touch installed-by-the-notebook\n%pip install definitely-not-a-package\n"
             "import time\nimport torch\nfrom torch.utils.data import DataLoader, Dataset"),
    ("code", STARVED.split("from torch.utils.data import DataLoader, Dataset")[1]),
    ("code", "torch.manual_seed(0)\n"
             "loader = DataLoader(SlowReads(), batch_size=16, num_workers=0)\n"
             "model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)"),
    ("code", "%%time\nfor x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n    opt.zero_grad()\n"
             "    loss.backward()\n    opt.step()"),
]


def notebook(path, cells, **metadata):
    nb = nbformat.v4.new_notebook(metadata=metadata)
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    nbformat.write(nb, str(path))
    return nb


def profile(tmp_path, *args, timeout=240):
    return subprocess.run(advise_cmd("profile", *args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout)


def test_a_notebooks_cells_run_as_the_script_and_its_finding_names_the_cell(tmp_path):
    nb = notebook(tmp_path / "starved.ipynb", CELLS)
    run = profile(tmp_path, *QUICK, "--no-experiments", "--out", "run", "--json", "starved.ipynb")
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["status"] == "ok" and report["throughput"]["n_steps"] >= 6
    starved = next(f for f in report["findings"] if f["code"] == "DL001")
    dataset_cell = nb.cells[2]  # the third cell: the Dataset whose __getitem__ waits
    getitem = dataset_cell.source.splitlines().index("    def __getitem__(self, i):") + 1  # the line in the cell
    [where] = starved["locations"]
    assert where["file"].endswith(f"starved.ipynb [cell 3, id {dataset_cell.id}]") and where["line"] == getitem
    assert where["function"] == "__getitem__"
    notes = " ".join(report["notes"])
    assert "!touch installed-by-the-notebook" in notes and "%pip install definitely-not-a-package" in notes
    assert "%matplotlib" not in notes  # dropped: it changes nothing the loop does
    assert not (tmp_path / "installed-by-the-notebook").exists()  # a shell line is never run


@pytest.mark.parametrize("content, said", [
    ("{not json", "not a notebook (invalid JSON at line 1"),
    (json.dumps({"nbformat": 9, "nbformat_minor": 0, "cells": [], "metadata": {}}), "nbformat 9 is not one this reader knows"),
    (None, "no code cell to run"),
    ("r-kernel", "its kernel runs R, not Python"),
])
def test_a_notebook_that_cannot_run_is_one_line_and_exit_2(tmp_path, content, said):
    path = tmp_path / "bad.ipynb"
    if content is None:
        notebook(path, [("markdown", "only words")])
    elif content == "r-kernel":
        notebook(path, [("code", "x <- 1")], kernelspec={"name": "ir", "language": "R", "display_name": "R"})
    else:
        path.write_text(content)
    run = profile(tmp_path, "--no-experiments", "--out", "run", "bad.ipynb", timeout=60)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and said in run.stderr, run.stderr
    assert not (tmp_path / "run").exists()


def test_a_cell_that_raises_fails_the_run_naming_the_cell(tmp_path):
    notebook(tmp_path / "raises.ipynb", [("code", "import torch"), ("code", "x = 1\nraise ValueError('cell two broke')")])
    run = profile(tmp_path, "--no-experiments", "--out", "run", "--json", "raises.ipynb", timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["status"] == "failed" and "cell two broke" in report["error"]
    assert "raises.ipynb [cell 2" in report["traceback"] and "line 2" in report["traceback"]


@pytest.mark.slow
def test_the_api_in_a_real_kernel_returns_the_report_and_shows_its_page_inline(tmp_path, browser):  # noqa: F811
    from nbclient import NotebookClient

    script = WORKLOADS / "train_basic.py"
    nb = notebook(tmp_path / "api.ipynb", [
        ("code", "import advisor.api as advise"),
        ("code", f"report = advise.profile({str(script)!r}, ['--epochs', '2'], steps=8, warmup=2, profile_steps=2, "
                 "experiments=False, out='run', quiet=True)\nreport.status, report.throughput.n_steps"),
        ("code", "report"),
        ("code", "try:\n    advise.profile('missing.py', quiet=True)\nexcept advise.AdviseError as exc:\n"
                 "    print('error', exc.exit_code, exc)"),
    ], kernelspec={"name": "python3", "language": "python", "display_name": "Python 3"})
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    status = nb.cells[1].outputs[0]["data"]["text/plain"]
    assert status.startswith("('ok', ") and int(status.split(",")[1].strip(" )")) >= 6
    shown = nb.cells[2].outputs[0]["data"]
    assert shown["text/plain"].startswith("advise report: ") and "samples/s" in shown["text/plain"]
    assert shown["text/html"].startswith('<iframe sandbox="" ') and "srcdoc=" in shown["text/html"]
    said = "".join(o.get("text", "") for o in nb.cells[3].outputs)
    assert said.startswith("error 2 ") and "missing.py" in said and "Traceback" not in said
    page = tmp_path / "inline.html"
    page.write_text(f"<!doctype html><html><body>{shown['text/html']}</body></html>")
    loaded = open_page(browser, page)
    assert loaded.requests == [] and loaded.console == []
    browser.switch_to.frame(browser.find_element("css selector", "iframe"))
    try:
        text = browser.find_element("tag name", "body").text
        assert "train_basic.py" in text and browser.execute_script("return document.scripts.length") >= 0
    finally:
        browser.switch_to.default_content()
    assert sys.executable  # the kernel is this interpreter's (ipykernel in this venv)
