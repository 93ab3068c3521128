"""Where a config comes from: a preset shipped inside the package, found by name, or a YAML file.

The presets live in `llm_replay/presets/` so an installed package has them wherever it runs
(`llm-replay train auto` from any directory). Every place that takes a config (the `train`,
`eval` and `rescore` commands, `extends:` inside a config, `config:` in an experiment, the demo)
resolves the text the same way (`find_config`): a preset name first, then a path (beside the
file that names it, or from the working directory on the command line). A text that is both is
an error naming both, so a local file never silently shadows a preset or the other way round.

`read_layered` follows `extends:` to its root, at most `MAX_EXTENDS_DEPTH` files deep, and every
error names the file that pointed to the bad one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_replay.config.parse import (
    ConfigError,
    closest,
    did_you_mean,
    load_yaml,
    merged,
    yaml_error,
)
from llm_replay.config.recipes import resolve_train
from llm_replay.config.steps import resolve_steps

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"
MAX_EXTENDS_DEPTH = 32
SUFFIX = ".yaml"


def preset_names() -> list[str]:
    """Every shipped preset's name: its path under `presets/` without `.yaml` (`base/chain_sum`)."""
    return sorted(p.relative_to(PRESETS_DIR).with_suffix("").as_posix() for p in _preset_files())


def _preset_files() -> list[Path]:
    return sorted(PRESETS_DIR.rglob("*" + SUFFIX)) if PRESETS_DIR.is_dir() else []


def preset_path(name: str) -> Path | None:
    """The file of preset `name`, or None when no preset has that name."""
    if not name or name.startswith(("/", ".")) or name.endswith(SUFFIX) or "\\" in name:
        return None
    candidate = PRESETS_DIR / (name + SUFFIX)
    if not candidate.is_file() or PRESETS_DIR.resolve() not in candidate.resolve().parents:
        return None
    return candidate


def find_config(text: str | Path, beside: Path | None = None, *, what: str = "config") -> Path:
    """The file `text` names: a preset, or a path (relative to `beside` when given, else to the
    working directory). Both at once, or neither, is a `ConfigError` naming where it looked."""
    raw = str(text)
    preset = preset_path(raw)
    as_path = Path(raw).expanduser()
    if beside is not None and not as_path.is_absolute():
        as_path = beside / as_path
    is_file = as_path.is_file()
    if preset is not None and is_file:
        how = f"as ./{raw}" if beside is None else "with its directory"
        raise ConfigError(
            f"{what} {raw!r}: both the preset {raw!r} ({preset}) and the file {as_path}; "
            f"rename the file, or name it {how}"
        )
    if preset is not None:
        return preset
    if is_file:
        return as_path
    if as_path.is_dir():
        raise ConfigError(f"{what} {raw!r}: {as_path} is a directory, not a YAML file")
    names = preset_names()
    near = closest(raw.removesuffix(SUFFIX), names) or closest(Path(raw).stem, names)
    hint = "" if near is None else f"; did you mean the preset {near!r}?"
    raise ConfigError(
        f"{what} {raw!r}: no preset of that name (`llm-replay presets` lists them) and no file "
        f"{as_path}{hint}"
    )


def read_layered(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """`path`'s mapping merged over the config it `extends` (and that one's, in turn)."""
    here = path.resolve()
    if here in chain:
        names = " -> ".join(str(p) for p in (*chain, here))
        raise ConfigError(f"{path}: extends itself ({names})")
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ConfigError(
            f"{chain[0]}: extends is more than {MAX_EXTENDS_DEPTH} files deep "
            f"({_abbreviated((*chain, here))})"
        )
    data = read_mapping(path)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: extends = {base!r}: must be a preset name or a YAML file")
    parent = find_config(base, path.parent, what=f"{path}: extends")
    return merged(read_layered(parent, (*chain, here)), data)


def read_mapping(path: Path, what: str = "config") -> dict[str, Any]:
    """One YAML file's top-level mapping, every failure one line naming the file."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what} file")
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        raise ConfigError(yaml_error(path, error)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return data


def _abbreviated(chain: tuple[Path, ...], ends: int = 3) -> str:
    names = [str(p) for p in chain]
    if len(names) > 2 * ends + 1:
        names = [*names[:ends], f"… {len(names) - 2 * ends} more …", *names[-ends:]]
    return " -> ".join(names)


@dataclass(frozen=True)
class Preset:
    """A shipped preset: its name, file, what it extends and the first line of its comment."""

    name: str
    path: Path
    extends: str | None
    summary: str

    @classmethod
    def read(cls, name: str) -> Preset:
        path = preset_path(name)
        if path is None:
            raise ConfigError(
                f"preset {name!r}: no such preset; choose one of {', '.join(preset_names())}"
                + did_you_mean(name, preset_names())
            )
        data = read_mapping(path)
        extends = data.get("extends")
        return cls(name, path, None if extends is None else str(extends), _summary(path))

    def resolved(self) -> dict[str, Any]:
        """The preset with its `extends:` chain merged in: one self-contained mapping."""
        return read_layered(self.path)

    def resolved_yaml(self) -> str:
        """`resolved()` as YAML with a header saying where it came from, ready to copy."""
        header = (
            f"# {self.name}: {self.summary}\n"
            "# Its `extends:` chain merged in: copy this file, edit it, then\n"
            "# `llm-replay train my.yaml`.\n"
        )
        body = yaml.safe_dump(
            resolve_steps(resolve_train(self.resolved())),
            sort_keys=False,
            allow_unicode=True,
            default_flow_style=None,
        )
        return header + str(body)


def _summary(path: Path) -> str:
    """The preset's first line, a comment saying in one sentence what it is."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    return first.lstrip("#").strip() if first.startswith("#") else ""


def presets() -> list[Preset]:
    return [Preset.read(name) for name in preset_names()]
