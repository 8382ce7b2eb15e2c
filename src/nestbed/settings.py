"""The user's configuration file: defaults for the settings that are otherwise environment
variables (and global options of the CLI), so that a user who always works on one cluster,
server or store need not say so each time.

The file is ``$NESTBED_CONFIG``, else ``$XDG_CONFIG_HOME/nestbed/config.yaml``
(``~/.config/nestbed/config.yaml``), a YAML mapping::

    cluster: tcp://pc1.lab:8786     # NESTBED_CLUSTER, --cluster
    server: https://testbed.lab     # NESTBED_SERVER, --server
    project: netlab                 # NESTBED_PROJECT, --project
    db: /srv/nestbed/store.db       # NESTBED_DB, --db (relative: from this file's folder)

``apply`` puts each entry into the environment unless the variable is already set (an empty
one included: ``NESTBED_CLUSTER= nestbed swapin ...`` runs on this machine), so an option
beats the variable, which beats the file; and everything a command starts (an experiment's
controller) sees the same. No file, no cost but one ``stat``: `nestbed exec` reads this
before it loads anything else, so only ``os`` is imported until there is a file.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing's: loaded on `nestbed exec`'s fast path
if TYPE_CHECKING:
    from pathlib import Path

CONFIG_ENV = "NESTBED_CONFIG"
ENTRIES = {  # entry -> the environment variable it sets
    "cluster": "NESTBED_CLUSTER",
    "server": "NESTBED_SERVER",
    "project": "NESTBED_PROJECT",
    "db": "NESTBED_DB",
}


def _config_dir(env: dict[str, str] | os._Environ[str]) -> str:
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "nestbed")


def config_dir(environ: dict[str, str] | None = None) -> Path:
    """nestbed's folder of the user's configuration (``$XDG_CONFIG_HOME/nestbed``)."""
    from pathlib import Path

    return Path(_config_dir(os.environ if environ is None else environ))


def _config_file(env: dict[str, str] | os._Environ[str]) -> str:
    return env.get(CONFIG_ENV) or os.path.join(_config_dir(env), "config.yaml")


def read(path: Path) -> dict[str, str]:
    """The entries of the configuration file ``path`` ({} when there is none)."""
    from nestbed.errors import UserError

    try:
        text = path.read_text()
    except FileNotFoundError:
        if os.environ.get(CONFIG_ENV):
            raise UserError(f"{CONFIG_ENV} names {path}, which does not exist") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the configuration file {path} ({exc})") from None
    import yaml

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or "not YAML"
        raise UserError(f"{where}: {problem}; the configuration file is a YAML mapping") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"{path}: the configuration file is a YAML mapping (cluster: ADDR, ...)")
    entries = {}
    for key, value in loaded.items():
        line = _line_of(text, key)
        if key not in ENTRIES:
            raise UserError(
                f"{path}:{line}: {key!r} is no setting; the file may set {', '.join(ENTRIES)}"
            )
        if not isinstance(value, str) or not value:
            raise UserError(f"{path}:{line}: {key} is not a string; write {key}: VALUE")
        if key == "cluster" and not value.startswith("tcp://"):
            raise UserError(f"{path}:{line}: cluster {value} is no address; write tcp://HOST:8786")
        if key == "db" and "://" not in value:  # a SQLite path: from the file's folder
            value = str(path.parent / os.path.expanduser(value))
        entries[key] = value
    return entries


def _line_of(text: str, key: object) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if line.split(":", 1)[0].strip().strip("'\"") == str(key):
            return number
    return 1


def apply() -> None:
    """The configuration file's entries into the environment, where not set already."""
    path = _config_file(os.environ)
    if not os.path.exists(path) and not os.environ.get(CONFIG_ENV):
        return
    from pathlib import Path

    for key, value in read(Path(path)).items():
        os.environ.setdefault(ENTRIES[key], value)
