"""A rule's documentation on the page: CommonMark through markdown-it, raw HTML off, headings inside the finding."""

from __future__ import annotations

from types import SimpleNamespace

from markupsafe import Markup

from advisor.reports.ruledoc import doc_html, docs_by_key

DOC = '''## What it does
Flags `DataLoader(num_workers=0)` on a machine with spare cores.

## Example
```python
loader = DataLoader(ds, batch_size=64)
```

Use instead:
```python
loader = DataLoader(ds, batch_size=64, num_workers=8)  # x < y && y > z
```

## Options
- `wait_threshold` (default 0.10)
- `min_wait_s` (default `0.005`)
'''


def test_sections_code_blocks_lists_and_inline_code_render():
    html = doc_html(DOC)
    assert isinstance(html, Markup)  # safe to put in the page as is
    assert "<h5>What it does</h5>" in html and "<h5>Example</h5>" in html and "<h2>" not in html
    assert "<p>Flags <code>DataLoader(num_workers=0)</code> on a machine with spare cores.</p>" in html
    assert '<pre class="code">loader = DataLoader(ds, batch_size=64)</pre>' in html
    assert "<p>Use instead:</p>" in html
    assert "# x &lt; y &amp;&amp; y &gt; z</pre>" in html  # code is escaped, not interpreted
    assert "<ul>\n<li><code>wait_threshold</code> (default 0.10)</li>\n<li><code>min_wait_s</code> (default <code>0.005</code>)</li>\n</ul>" in html


def test_indented_code_and_deeper_headings():
    html = doc_html("### Known problems\n\n    torch.compile(model)\n")
    assert html == '<h6>Known problems</h6>\n<pre class="code">torch.compile(model)</pre>'


def test_raw_html_and_script_links_stay_text():
    html = doc_html('<script>alert(1)</script>\n\nA <b onclick="x()">bold</b> [click](javascript:alert(1)) claim.\n'
                    '\n    <img src=x onerror=alert(2)>\n')
    assert "<script" not in html and "<b " not in html and "<img" not in html and "href" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '&lt;b onclick=&quot;x()&quot;&gt;bold&lt;/b&gt;' in html
    assert '<pre class="code">&lt;img src=x onerror=alert(2)&gt;</pre>' in html


def test_no_doc_is_no_html():
    assert doc_html("") == "" and doc_html("  \n") == ""


def test_docs_are_keyed_by_name_and_code():
    rules = [SimpleNamespace(name="dataloader-starvation", code="DL001", doc="a"), SimpleNamespace(name="x", code="", doc="b")]
    assert docs_by_key(rules) == {"dataloader-starvation": "a", "DL001": "a", "x": "b"}


_RENDER_TWICE = """
import sys
from advisor.reports.ruledoc import doc_html
html = doc_html(sys.argv[1])
print("markdown_it" in sys.modules)
print(html)
"""


def test_a_rendered_doc_is_kept_and_read_back_without_markdown_it(tmp_path):
    """The first report renders a doc (markdown-it imported); the next reads the same HTML back
    from the private cache folder and never imports markdown-it."""
    import subprocess
    import sys
    import uuid

    doc = f"## What it does\nFlags `x` ({uuid.uuid4().hex}: a text no earlier run kept).\n"
    runs = [subprocess.run([sys.executable, "-c", _RENDER_TWICE, doc], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    first, second = (r.split("\n", 1) for r in runs)
    assert first[0] == "True" and second[0] == "False", runs
    assert first[1] == second[1] == str(doc_html(doc)) + "\n" and "<h5>What it does</h5>" in first[1]


def test_no_cache_folder_or_a_read_only_one_still_renders(tmp_path, monkeypatch):
    from advisor.reports import ruledoc

    want = str(doc_html(DOC))
    monkeypatch.setattr(ruledoc, "_cache", lambda: (None, ""))
    assert str(doc_html(DOC)) == want
    monkeypatch.setattr(ruledoc, "_cache", lambda: (str(tmp_path / "missing"), "r"))  # every write fails
    assert str(doc_html(DOC)) == want and not (tmp_path / "missing").exists()
