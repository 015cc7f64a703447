"""The deprecated `core_context.searcher`, as scripts for older Determined
releases use it: one operation of the configured `searcher.max_length`."""

import pytest

from determined.core import SearcherContext, Unit

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def run_one(searcher: SearcherContext, trained: float) -> list[int]:
    lengths = []
    for op in searcher.operations():
        lengths.append(op.length)
        op.report_progress(trained)
        op.report_completed(0.1)
    return lengths


@pytest.mark.filterwarnings("default::FutureWarning")
def test_operations_warn_that_they_are_deprecated() -> None:
    with pytest.warns(FutureWarning, match="deprecated"):
        next(SearcherContext(1).operations())


def test_one_operation_of_max_length_reports_progress_as_a_fraction() -> None:
    progress: list[float] = []
    searcher = SearcherContext({"epochs": 20}, progress.append)
    assert run_one(searcher, 5) == [20]
    assert progress == [0.25]
    assert searcher.get_configured_units() == Unit.EPOCHS


def test_a_unitless_length_and_progress_past_the_end() -> None:
    progress: list[float] = []
    searcher = SearcherContext(8, progress.append)
    assert run_one(searcher, 80) == [8] and progress == [1.0]
    assert searcher.get_configured_units() is None


def test_without_max_length_it_explains_the_deprecation() -> None:
    with pytest.raises(
        ValueError, match="only available when the experiment config sets searcher.max_length"
    ):
        next(SearcherContext(None).operations())


def test_an_operation_left_incomplete_is_an_error() -> None:
    operations = SearcherContext(3).operations()
    next(operations)
    with pytest.raises(RuntimeError, match="report_completed"):
        next(operations)


def test_an_operation_is_completed_once_and_by_the_chief() -> None:
    op = next(SearcherContext(3).operations())
    op.report_completed(1.0)
    with pytest.raises(RuntimeError, match="already called"):
        op.report_completed(1.0)
    worker_op = next(SearcherContext(3, is_chief=False).operations())
    with pytest.raises(RuntimeError, match="only the chief"):
        worker_op.report_progress(1)
