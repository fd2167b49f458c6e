"""Requests of many kinds built from text available offline, held out by subject, and the task that
measures a draft on the held-out side (``task.HeldoutTask``); the distillation corpus draws its
training requests from the other side of the same split.

- `sources`: the text of the four task families, in the tasks' prompt formats;
- `requests`: requests of many kinds built from text available offline (documentation, package
  metadata, Debian text, translation catalogues), held out by subject: each kind's builder and
  pools in one registry, its templates and word lists in `mtad/assets/requests/` (`request_data`);
  the text sources in `installed_text`, `docstrings`, the subjects in `subjects`, the shared
  phrasing in `prose`, the word problems in `arithmetic`, code and SQL requests in `code_requests`;
- `kinds`: the kinds of request trained on and held out of training, and their weights;
- `task`: the ``heldout`` task, ``per_kind`` held-out requests of every kind (perplexity and speed).
"""

from mtad.tasks.heldout.task import HeldoutTask

__all__ = ["HeldoutTask"]
