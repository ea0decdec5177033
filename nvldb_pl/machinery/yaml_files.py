"""YAML config files read as the fit CLI and the live API both read them: a key given twice in one mapping is refused
(YAML keeps the last one silently: ``rounds: 20`` then ``rounds: 30`` would run 30; two ``data:`` sections would drop
the first whole); and the CLI's ``--config`` files checked before Lightning reads them (:func:`check_config_files`)."""

from __future__ import annotations

import os
import re

from ..maths.checks import LINKED_FROM_DATA
from .host import open_text


class DuplicateKey(ValueError):
    """A key given twice in one mapping of a config file."""


def unique_keys_loader():
    """A YAML SafeLoader that refuses a key given twice in one mapping (:class:`DuplicateKey`, naming both lines)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        # the mapping's own keys (a merge key's, <<: *anchor, may be overridden by them: YAML's merge, not a repeat)
        own = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        loader.flatten_mapping(node)  # <<: merged in, as SafeLoader's own mappings do
        seen = {}
        for key_node in own:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise DuplicateKey(
                    f"the key {key!r} is given twice in one mapping (lines {seen[key] + 1} and "
                    f"{key_node.start_mark.line + 1}); YAML would keep the last one silently: give it once"
                )
            seen[key] = key_node.start_mark.line
        return loader.construct_mapping(node, deep=deep)

    UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return UniqueKeys


def refuse_duplicate_keys(text: str, where: str) -> None:
    """A ValueError ``"<where>: the key ... is given twice ..."`` where ``text`` gives a key twice in one mapping
    (YAML that does not parse is left to the caller's reader, which says so)."""
    import yaml

    try:
        yaml.load(text, Loader=unique_keys_loader())
    except DuplicateKey as err:
        raise ValueError(f"{where}: {err}") from None
    except yaml.YAMLError:
        pass


CLASS_KEYS = ("class_path", "init_args", "dict_kwargs", "__path__")


def refuse_settings_beside_class_path(config, where: str, at: str = "") -> None:
    """A ValueError naming ``where`` and the section where a mapping gives ``class_path`` with settings beside it
    (``class_path: NDB`` then ``width: 8``): the fit CLI's reader takes a class's settings under ``init_args`` only
    (and said "model.class_path: not an option"), and an earlier live reader dropped them silently."""
    if isinstance(config, list):
        for k, item in enumerate(config):
            refuse_settings_beside_class_path(item, where, f"{at}[{k}]")
    if not isinstance(config, dict):
        return
    if "class_path" in config:
        beside = sorted(str(k) for k in config if k not in CLASS_KEYS)
        if beside:
            section = at or "the file"
            raise ValueError(
                f"{where}: {section}: {beside} beside class_path: a class's settings go under init_args "
                f"(class_path: {config['class_path']}, then init_args: {{{beside[0]}: ...}})"
            )
    for key, value in config.items():
        refuse_settings_beside_class_path(value, where, f"{at}.{key}" if at else str(key))


def refuse_linked_in_model(config, where: str) -> None:
    """A ValueError naming ``where`` where a config's ``model`` (its settings, or its ``init_args``) gives a field
    the learner takes from the data (``dim``, ``arms``, ``rounds``, ``num_seeds``, ``link``): the data's value ran,
    and the one given here was dropped without a word."""
    from ..maths.checks import LINKED_FROM_DATA

    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return
    args = model.get("init_args") if "class_path" in model else model
    for key in LINKED_FROM_DATA:
        if isinstance(args, dict) and key in args:
            raise ValueError(linked_message(key, where))


def linked_message(key: str, where: str = "") -> str:
    return (
        f"{where + ': ' if where else ''}model.{key}: the learner takes it from data.{key} (the data's value runs); "
        f"give data.{key} instead"
    )


SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")  # configs/ as installed


def shipped_config(name: str) -> str | None:
    """The path of the config the package ships under ``name`` (``cos``, ``cos.yaml``, ``literal/cos``), else None."""
    path = os.path.join(SHIPPED, name if name.endswith((".yaml", ".yml")) else name + ".yaml")
    inside = os.path.realpath(path).startswith(os.path.realpath(SHIPPED) + os.sep)
    return path if inside and os.path.isfile(path) else None


def shipped_names() -> list[str]:
    """The shipped configs' names, as ``--config`` takes them."""
    found = []
    for folder, _, files in os.walk(SHIPPED):
        rel = os.path.relpath(folder, SHIPPED)
        found += [os.path.normpath(os.path.join(rel, f))[: -len(".yaml")] for f in files if f.endswith(".yaml")]
    return sorted(found)


def config_paths(argv: list[str]) -> list[str]:
    """Each ``--config`` (``-c``) value as the file it names: ``~`` expanded (no shell does it after ``=``), and a
    name with no such file here (``--config cos``) as the config the package ships under it, wherever the package is
    installed (a file of that name in the working folder comes first; YAML given inline is left to the parser). A
    name that is neither is refused, listing the shipped. Other arguments as given."""
    out = list(argv)
    for i, a in enumerate(out):
        if a.startswith(("--config=", "-c=")):
            flag, value = a.split("=", 1)
        elif i > 0 and out[i - 1] in ("--config", "-c") and not a.startswith("-"):
            flag, value = None, a
        else:
            continue
        value = os.path.expanduser(value) if value.startswith("~") else value
        if not (os.path.exists(value) or any(c in value for c in ":{\n")):  # neither a file nor inline YAML
            path = shipped_config(value)
            if path is None:
                raise ValueError(
                    f"--config: {value} is neither a file nor a config the package ships (one of "
                    f"{', '.join(shipped_names())})"
                )
            value = path
        out[i] = value if flag is None else f"{flag}={value}"
    return out


def check_config_files(argv: list[str]) -> None:
    """Each ``--config`` file that exists must be a YAML mapping of settings: a syntax error, a file that is
    not text, an empty file or a list is named with its file (the parser's own reports say ``"<unicode
    string>", line 4``, ``'utf-8' codec can't decode ...`` or ``Unexpected config: - 1``)."""
    import yaml

    _UniqueKeys = unique_keys_loader()
    for arg in argv:  # --model.dim 7 ran with data.dim's 5, without a word
        linked = re.match(r"--model\.(init_args\.)?(\w+)(=|$)", arg)
        if linked and linked.group(2) in LINKED_FROM_DATA:
            raise ValueError(linked_message(linked.group(2)))
    paths = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--config", "-c")]
    paths += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for path in paths:
        if os.path.isfile(path):
            try:
                with open_text(path, "--config") as fh:
                    config = yaml.load(fh, Loader=_UniqueKeys)
            except yaml.YAMLError as err:
                raise ValueError(f"--config: {path} is not valid YAML ({' '.join(str(err).split())})") from None
            except DuplicateKey as err:
                raise ValueError(f"--config: {path}: {err}") from None
            refuse_settings_beside_class_path(config, f"--config: {path}")
            refuse_linked_in_model(config, f"--config: {path}")
            if not isinstance(config, dict):
                what = (
                    "is empty"
                    if config is None
                    else "holds a list, not a mapping of settings"
                    if isinstance(config, list)
                    else f"holds the value {config!r}, not a mapping of settings"
                )
                raise ValueError(f"--config: {path} {what}; a config is a YAML mapping, such as configs/cos.yaml")


def _nvldb_section(config) -> dict | None:
    """The settings of a config's model section where it runs the package's NVLDB (no class_path, or one naming it),
    else None (another learner's settings are that learner's)."""
    model = config.get("model") if isinstance(config, dict) else None
    if not isinstance(model, dict):
        return None
    path = model.get("class_path")
    if path is None:
        return model
    if path in ("NVLDB", "nvldb_pl.NVLDB", "nvldb_pl.learners.NVLDB", "nvldb_pl.learners.nvldb.NVLDB"):
        return model.setdefault("init_args", {}) if isinstance(model.get("init_args", {}), dict) else None
    return None


def upgraded_config_args(argv: list[str]) -> list[str]:
    """``argv`` with each ``--config`` file whose NVLDB settings use a name a migration renamed (a run's config.yaml
    of an older version: ``self_duel_test``) given as its text with the new names (:data:`nvldb_pl.migrations.RENAMED`),
    said on stderr; the file itself is not changed. A renamed setting on the command line is refused, naming its new
    name."""
    from ..migrations import NESTED, RENAMED, renamed_settings

    old = RENAMED["NVLDB"]
    for i, arg in enumerate(argv):
        given = re.match(r"--model\.(init_args\.)?(\w+)(=|$)", arg)
        if given and given.group(2) in old:
            raise ValueError(f"model.{given.group(2)}: the setting is model.{old[given.group(2)]} now")
        if given and given.group(2) in NESTED:  # (the parser would pass a list on, to fail deep in it)
            value = arg.split("=", 1)[1] if given.group(3) else (argv[i + 1] if i + 1 < len(argv) else "")
            _refuse_unmapped(given.group(2), read_yaml(value))
    out, i = [], 0
    while i < len(argv):
        arg, path = argv[i], None
        if arg in ("--config", "-c") and i + 1 < len(argv):
            path, i = argv[i + 1], i + 1
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        i += 1
        if path is None:
            out.append(arg)
            continue
        out += ["--config", _upgraded_config(path, old, renamed_settings)]
    return out


def _refuse_unmapped(group: str, value, where: str = "") -> None:
    """A group of settings (``model.self_duel``) must be a mapping of its fields (or null)."""
    from ..migrations import NESTED

    if value is not None and not isinstance(value, dict):
        fields = list(dict.fromkeys(NESTED[group].values()))
        example = f"{{module: {value}}}" if "module" in fields and isinstance(value, str) else f"{{{fields[0]}: ...}}"
        raise ValueError(f"{where}model.{group}: {value!r} is not a mapping of {', '.join(fields)} (e.g. {example})")


def _upgraded_config(path: str, old: dict, renamed_settings) -> str:
    """``path``, or its text with the new names where its NVLDB settings use an old one (said on stderr)."""
    import sys

    import yaml

    if not os.path.isfile(path):
        return path
    with open_text(path, "--config") as fh:
        config = read_yaml(fh.read())
    from ..migrations import NESTED

    section = _nvldb_section(config)
    for group in NESTED if section is not None else ():
        if group in section:
            _refuse_unmapped(group, section[group], f"--config {path}: ")
    if section is None or not any(k in section for k in old):
        return path
    names = ", ".join(f"{k} as {old[k]}" for k in old if k in section)
    new = renamed_settings(section, ("NVLDB",))
    section.clear()
    section.update(new)
    print(f"--config {path}: read model.{names} (an older version's names)", file=sys.stderr)
    return yaml.safe_dump(config, sort_keys=False)


def read_yaml(text: str):
    """YAML as the fit CLI reads it (jsonargparse's loader: ``1e-3`` is a number, not YAML 1.1's string)."""
    try:
        from jsonargparse import get_loader
    except ImportError:  # an older jsonargparse: PyYAML's own reading
        import yaml

        return yaml.safe_load(text)
    return get_loader("yaml")(text)
