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
