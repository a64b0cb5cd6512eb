"""The user's own config folder, ``./conf`` (after decpriv's package on Hydra's search path): a yaml that
cannot be read, or one that a packaged option of the same name hides, refused in one sentence naming the
file, where Hydra would say only "while parsing a flow node" or nothing at all."""

from pathlib import Path

import yaml

from decpriv.errors import ConfigError

USER_CONF = Path("conf")  # hydra.searchpath's file://conf, relative to the working folder


def unreadable_yaml() -> str | None:
    """The first yaml under ./conf that is not valid YAML, as one sentence (None when all read)."""
    if not USER_CONF.is_dir():
        return None
    for file in sorted(USER_CONF.rglob("*.yaml")):
        try:
            yaml.safe_load(file.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            where = getattr(error, "problem_mark", None)
            line = f", line {where.line + 1}" if where is not None else ""
            problem = getattr(error, "problem", None) or getattr(error, "context", None) or str(error)
            return f"{file}: not valid YAML ({problem}{line}); fix the file or move it out of ./conf"
    return None


def check_not_shadowed(choices: dict) -> None:
    """A chosen option whose ./conf yaml is hidden by decpriv's own option of that name is refused: Hydra
    reads the package first, so the user's file would silently not be the one that runs."""
    from importlib import resources

    package = resources.files("decpriv.conf")
    for group, option in choices.items():
        if not isinstance(option, str) or group.startswith("hydra"):
            continue
        mine = USER_CONF / group / f"{option}.yaml"
        if mine.is_file() and package.joinpath(group, f"{option}.yaml").is_file():
            raise ConfigError(
                f"{mine}: decpriv's own {group}={option} comes first on Hydra's search path, so this file "
                f"would not be read; rename it (e.g. {USER_CONF / group / f'my_{option}.yaml'}) and choose "
                f"{group}=my_{option}"
            )
