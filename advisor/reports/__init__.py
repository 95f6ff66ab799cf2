"""Renderers of the report (installed as ``advisor.reports``).

- ``render``: the one contract (a name, a file, ``render(document) -> str``); ``renderers``: the
  documents and one table of renderers per kind, whose names are the ``--format`` choices
- ``terminal``: the progress line and the summary after a run; ``compare_output``: ``advise compare``;
  ``ab_output``: ``advise ab``; ``slower_ops``: where the time went; ``agent``: the agents' summary
- ``html`` (report.html) and ``markdown`` (CI step summaries), both from one view model:
  ``page`` (the page and its header), ``findings_view``, ``ruledoc``, ``ops_view``,
  ``timeline_view``, ``run_view``; ``charts`` places the SVG shapes
- ``words``: how a measurement is said, by every renderer
- ``templates/``: the jinja templates and the inlined CSS and JS
"""
