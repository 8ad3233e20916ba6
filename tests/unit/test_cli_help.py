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


def test_old_spellings_still_work_for_one_release_and_say_the_new_one():
    from click.testing import CliRunner

    from bridge.lab.ports import free_port

    runner, port = CliRunner(), free_port()
    nobody = f"127.0.0.1:{port}"
    old = runner.invoke(main, ["status", "--primary", nobody, "--replica", nobody])
    new = runner.invoke(main, ["status", "--primary-metrics", nobody, "--replica-metrics", nobody])
    assert old.exit_code == new.exit_code == 1  # neither answers, at the addresses given either way
    assert "--primary is deprecated and goes in the next release: use --primary-metrics" in old.stderr
    assert "deprecated" not in new.stderr and str(port) in new.stdout and str(port) in old.stdout
    url = f"mysql://u:pw@127.0.0.1:{port}"
    by_env = runner.invoke(main, ["verify", "--target", url], env={"RDMA_BRIDGE_VERIFY_PRIMARY": url})
    assert "$RDMA_BRIDGE_VERIFY_PRIMARY is deprecated and goes in the next release: use --source " \
           "(or $RDMA_BRIDGE_CHECK_SOURCE)" in by_env.stderr
    assert "pw" not in by_env.stderr + by_env.stdout
    missing = runner.invoke(main, ["checksum", "--target", url])
    assert missing.exit_code == 2 and "Missing option '--source' (or $RDMA_BRIDGE_CHECK_SOURCE)" in missing.stderr


def test_a_renamed_option_the_command_requires_shows_as_required():
    """`checksum --source` is required though click may not enforce it (its old spelling
    stands in for it): --help says [required] all the same."""
    from click.testing import CliRunner

    shown = CliRunner().invoke(main, ["checksum", "--help"]).output
    source = shown[shown.index("--source"):shown.index("--target")]
    assert "[required]" in source and "[required]" in shown[shown.index("--target"):shown.index("--channel")]


def test_version_names_the_release_the_wire_protocol_and_every_compiled_part():
    import subprocess
    import sys

    from bridge import __version__
    from bridge.ring.layout import RING_LAYOUT_VERSION
    from bridge.wire import control, native

    out = subprocess.run([sys.executable, "-m", "bridge", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, *parts = out.stdout.splitlines()
    assert first == (f"rdma-bridge {__version__} (wire protocol version {control.PROTOCOL_VERSION}, "
                     f"ring layout {RING_LAYOUT_VERSION})")
    named = ", ".join(line.split(": ", 1)[1].split(" (")[0] for line in parts).split(", ")
    assert sorted(p for p in named if p != "none") == sorted(native.PARTS)  # each part, compiled or not
    assert parts[0].startswith("compiled: ")


def test_every_compiled_part_is_a_module_setup_builds():
    from pathlib import Path

    from bridge.wire import native

    root = Path(__file__).resolve().parents[2]
    for module in native.PARTS.values():
        assert (root / (module.replace(".", "/") + ".pyx")).exists(), module


def test_every_url_option_takes_its_password_from_a_variable_of_its_own():
    """A URL option (metavar URL) reads the whole URL from its variable, or, where the URL
    has no password, the password alone from that variable's _PASSWORD twin, which the
    command parses it with (bridge.config.PASSWORD_ENV); the help says which."""
    import inspect

    from bridge.config import PASSWORD_ENV

    seen = set()
    for path, command in commands(main):
        for param in command.params:
            if not isinstance(param, click.Option) or param.metavar != "URL" or not param.envvar:
                continue
            envvar = param.envvar if isinstance(param.envvar, str) else param.envvar[0]
            wanted = f"{envvar}_PASSWORD"
            source = inspect.getsource(command.callback)
            assert wanted in PASSWORD_ENV.values() and any(
                f'PASSWORD_ENV["{k}"]' in source for k, v in PASSWORD_ENV.items() if v == wanted), \
                (" ".join(path), param.opts[0], wanted)
            seen.add(wanted)
    assert len(seen) >= 5
