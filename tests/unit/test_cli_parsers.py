"""`det <noun> ...` builds only its noun's parser (determined/cli/__main__.py COMMAND_MODULES):
the table names every noun each module adds, and a part-built parser reads as the whole one."""

import argparse
import importlib

import pytest

from determined.cli.__main__ import COMMAND_MODULES, build_parser


def nouns(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_the_table_names_the_nouns_each_module_adds(module: str) -> None:
    parser = argparse.ArgumentParser(prog="det")
    importlib.import_module(f"determined.cli.{module}").add_parser(parser.add_subparsers())
    assert tuple(nouns(parser)) == COMMAND_MODULES[module]


def test_every_noun_has_one_module() -> None:
    every = [noun for names in COMMAND_MODULES.values() for noun in names]
    assert sorted(every) == sorted(nouns(build_parser()))


@pytest.mark.parametrize("noun", [noun for names in COMMAND_MODULES.values() for noun in names])
def test_a_noun_alone_reads_as_in_the_whole_parser(noun: str) -> None:
    alone, whole = nouns(build_parser([noun])), nouns(build_parser())
    assert noun in alone and tuple(alone) in COMMAND_MODULES.values()
    assert alone[noun].format_help() == whole[noun].format_help()


@pytest.mark.parametrize(
    ("argv", "built"),
    [
        (["e", "list"], ["experiment", "e"]),
        (["-m", "host:1", "-u", "e", "t", "logs", "1"], ["trial", "t"]),
        (["--master=host:1", "--user", "admin", "slot"], ["agent", "a", "slot", "s"]),
        (["-mhost:1", "-uadmin", "deploy", "local"], ["deploy"]),
        ([], None),
        (["--help", "e"], None),
        (["--us", "e", "t"], None),  # an abbreviation: argparse decides what it means
        (["nonsense"], None),
    ],
)
def test_the_noun_is_found_after_dets_own_options(argv: list[str], built: list[str] | None) -> None:
    assert list(nouns(build_parser(argv))) == (built or list(nouns(build_parser())))


def test_help_and_errors_read_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["nonsense"], ["e", "nonsense"], ["-m"]):
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
        alone = capsys.readouterr()
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert capsys.readouterr() == alone
