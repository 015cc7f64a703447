"""`core_context.searcher`: deprecated in Determined 0.38 and not offered here.

Training length belongs in user code; the searcher decides by the validation metrics it
receives. Any use of the placeholder says so.
"""

from typing import NoReturn

_DEPRECATED = (
    "core_context.searcher is deprecated and not available: decide the training length in your "
    "own code (for example from hyperparameters) and report validation metrics with "
    "core_context.train.report_validation_metrics(); the searcher stops trials itself"
)


class SearcherContext:
    def __getattr__(self, name: str) -> NoReturn:
        raise ValueError(f"{_DEPRECATED} (tried core_context.searcher.{name})")
