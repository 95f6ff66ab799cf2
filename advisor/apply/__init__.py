"""``advise apply``: the recommended configuration written into the user's own code as a patch.

The probe saw where each thing a fix changes lives in the script (:mod:`.sites`); each override
of the vocabulary becomes edits of those lines (:mod:`.fixes`) on a lossless syntax tree
(:mod:`.rewrite`), or, where the value comes from the script's own switch (:mod:`.switches`), that
switch: a flag or variable said as the run's command line (:mod:`.command_line`), a YAML key
(:mod:`.config_file`), the script's own autocast turned (:mod:`.own_autocast`); then a unified
diff from the script's checkout (:mod:`.patch`), and, on request,
the patched script timed against the unpatched one in fresh runs, as ``advise ab`` times two
checkouts (:mod:`.check`). The pipeline stores the same patch in report.json
(``recommended.patch``) when it builds the report.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Sequence

from ..run_dir.seen import Observed, Sources
from .fixes import Files
from .patch import Patched, build, git_root, write
from .rewrite import Refused
from .sites import Sites, read as read_sites

__all__ = ["Files", "Patched", "Refused", "Sites", "build", "command_for", "git_root", "patch_for", "read_sites", "write"]


def command_for(run_dir: str | os.PathLike) -> str:
    """The command that writes a run's patch, as the terminal and the page print it."""
    return shlex.join(["advise", "apply", "--write", os.fspath(run_dir)])


def patch_for(overrides: dict, observed: Observed, sources: Sources | None, script: str | None, *,
              search: Sequence[Path] = (), expected: dict[str, str] | None = None, command: str = "",
              argv: Sequence[str] = (), files: Files | None = None) -> Patched:
    """The patch of a run's recommended `overrides`, from what the probe saw (report.json's
    `observed`, its `sources.json`) and the report's `script` and `argv` (`files`: parsed files to share)."""
    return build(overrides, read_sites(observed, sources, script, search), expected=expected, command=command,
                 script=script or "", argv=argv, files=files)
