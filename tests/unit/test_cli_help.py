"""Every command and every option of `rdma-bridge` says what it is for in `--help`."""

import click

from bridge.cli import main


def commands(group: click.Group, path=("rdma-bridge",)):
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, path + (name,))
        else:
            yield path + (name,), command


def test_every_command_and_option_has_help_text():
    silent = []
    for path, command in commands(main):
        if not (command.help or command.short_help):
            silent.append(" ".join(path))
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip():
                silent.append(f"{' '.join(path)} {param.opts[0]}")
    assert not silent, f"no help text: {silent}"


def test_help_speaks_to_the_user_not_of_the_project():
    for path, command in commands(main):
        texts = [command.help or ""] + [p.help or "" for p in command.params if isinstance(p, click.Option)]
        for text in texts:
            assert "our benchmarks" not in text and "issue " not in text.lower(), (" ".join(path), text)
