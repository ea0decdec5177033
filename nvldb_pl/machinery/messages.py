"""The CLI's refusals as a user should read them: one line that names the field.

jsonargparse reports a value it cannot take as a tree: the key, then every type of a Union the
value did not match (``Expected a <class 'NoneType'>``), the subtypes, the given value's type and
repr. ``parser_message`` keeps the fields and the reasons; ``user_message`` does the same for the
refusals raised while the classes are built (a learner's ``model.lr: must be > 0``). And the few warnings
from inside Lightning a user can do nothing about, filtered by their text (:func:`quiet_lightning`); a refusal's line
started on a line of its own (:func:`end_progress_line`), marked with the rank that made it (:func:`rank_prefix`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

from lightning.pytorch.cli import LightningArgumentParser
from ..maths.checks import shadow_note

_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value type:",
    "Not a valid subclass of",
    "Subclass types expect one of",
    "a class path (str)",
    "a dict with class_path entry",
    "a dict without class_path",
    "a dict with parameters accepted by the base class",
    "Given value: Namespace(",
    "Given value: [Namespace(",
    "Given value: NestedArg(",
)


def parser_message(message: str, learners: tuple = ()) -> str:
    """jsonargparse's report of a value the parser refused, as ``field: reason; field: reason``.

    >>> parser_message('Parser key "model":\\n  Errors:\\n    - Problem with given class_path \\'nvldb_pl.NVLDB\\':\\n'
    ...                '        Parser key "width":\\n          Expected a <class \\'int\\'>. Got value: 32.0')
    'model.width: expected an integer, got 32.0'
    """
    stack: list[tuple[int, str]] = []  # (indent, key or class path) of the lines above the current one
    found: dict[str, list[str]] = {}  # field -> its reasons, in order
    given: dict[str, str] = {}  # field -> the value given, where the report says it
    for raw in message.splitlines():
        line = raw.strip()
        if not line:
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        head = re.match(r'Parser key "([^"]+)":\s*(.*)$', line)
        if head:
            stack.append((indent, head.group(1)))
            line = head.group(2)
        line = line[2:] if line.startswith("- ") else line
        cls = re.match(r"Problem with given class_path '([^']+)':\s*(.*)$", line)
        if cls:
            stack.append((indent, "@" + cls.group(1)))
            line = cls.group(2)
        if not line or line.startswith(_NOISE):
            continue
        keys = [k for _, k in stack if not k.startswith("@")]
        classes = [k[1:] for _, k in stack if k.startswith("@")]
        field = ".".join(keys)
        if line.startswith("Given value: "):
            given.setdefault(field, line[len("Given value: ") :])
            continue
        unwritable = re.match(r"\('cannot represent an object', (.*)\)$", line)
        if (
            unwritable
        ):  # YAML cannot hold a default of the class (Timer's interval): the run's config.yaml could not be written
            line = f"{unwritable.group(1)} cannot be written into the run's config.yaml"
            if "Interval." in line:  # Lightning's Timer callback
                line = f"trainer.callbacks: Timer's {line}; a time limit is --trainer.max_time DD:HH:MM:SS"
        option = re.match(r"Option '([^']+)' is not accepted", line)
        if option:
            field = ".".join(keys + [option.group(1)])
            line = f"not an option of {classes[-1] if classes else keys[-1] if keys else 'this command'}"
        elif classes and not re.match(r'Expected a|Parser key', line):
            line = f"{classes[-1]}: {line}"
        found.setdefault(field, []).append(line)
    if not found:
        return " ".join(message.split())
    parts = []
    for field, reasons in found.items():
        reasons = [r for r in reasons if r != "Expected a <class 'NoneType'>"]  # None is never the value meant
        reasons = [
            r
            for i, r in enumerate(reasons)  # the class that refused an option, not also its base classes
            if not (r.startswith("not an option of") and any(q.startswith("not an option of") for q in reasons[:i]))
        ]
        if not reasons:  # a Union's key whose reasons are its member's (model: under model.width)
            continue
        said = [r for r in reasons if not r.startswith(("Expected a <class", "Expected a typing", "Expected a path"))]
        if field == "model" and any(r.startswith("Expected a dot import path") for r in reasons):
            names = f"one of {', '.join(learners)}, or " if learners else ""
            said = [f"{given.get(field, 'the value')} is not a learner: give {names}a class path"]
        reasons = said or [r for r in reasons if not r.startswith("Expected a path")] or reasons
        text = "; ".join(_lower_first(r) for r in reasons)
        if field in given and "Got value" not in text and given[field] not in text:
            text += f"; got {given[field]}"
        parts.append(f"{field}: {text}" if field else text)
    return _plain_types("; ".join(parts).replace(". Got value: ", ", got "))


TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a text", "dict": "a mapping"}


def _plain_types(text: str) -> str:
    """``expected a <class 'int'>`` as a user reads it (``expected an integer``), a repeated "or none" dropped."""
    text = re.sub(r"; expected a <class 'NoneType'>(, got [^;(]*)?", "", text)
    return re.sub(r"expected a <class '(\w+)'>", lambda m: f"expected {TYPE_WORDS.get(m.group(1), m.group(1))}", text)


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:] if text.startswith("Expected") else text


def user_message(err: Exception) -> str:
    """The error as a user should read it. A learner's refusal of an argument (``model.lr: must be
    > 0``) reaches here inside jsonargparse's report on the model's Union type, with a dump of the
    whole model namespace; keep just the refusals, which name their fields."""
    text = str(err)
    duration = re.match(r"`Timer\(duration=(.*)\)` is not a valid duration", text)  # Lightning's, naming no field
    if duration:
        return f"trainer.max_time: {duration.group(1)} is not a duration; give DD:HH:MM:SS (00:12:00:00: 12 hours)"
    if text.startswith("Does not validate against any of the Union subtypes"):
        items: list[list[str]] = []  # each "- ..." line of the report, with the deeper lines under it
        for line in text.splitlines():
            if line.startswith("  - "):
                items.append([line[4:].strip()])
            elif line.startswith("      ") and items:
                items[-1].append(line.strip())
        # the other types the value did not match (Expected a <class 'bool'>, ...) say nothing when one
        # alternative says why it failed (a learner's refusal; a logger whose package is not installed)
        named = [" ".join(i) for i in items if not i[0].startswith(("Expected a <class", "Not a valid subclass"))]
        if named and not any(n.startswith("Does not validate") for n in named):
            return "; ".join(named)
        return parser_message(text)  # a Union inside the Union: the tree, cleaned
    return text


class BanditArgumentParser(LightningArgumentParser):
    """Lightning's parser, with its refusals as one ``error:`` line (no usage block of every option).
    ``learner_names``: the names a wrong ``--model`` is told of (the CLI's subclass sets them)."""

    learner_names: tuple = ()

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error:  # a parser inside another (a Union's class): the outer one reports
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        help_command = f"{prog if prog.endswith(' fit') else prog + ' fit'} --help"  # fit: the one subcommand
        said = parser_message(message, self.learner_names)
        missing = re.search(r"module '([\w.]+)' has no attribute", said)  # a class path into a shadowed module?
        said += shadow_note(missing.group(1)) if missing else ""
        sys.stderr.write(f"error: {said} ({help_command} lists the options)\n")
        sys.stderr.flush()
        self.exit(2)


# Warnings from inside Lightning that a user of this package can do nothing about, filtered by
# their exact text (every other warning still shows):
# - Lightning's own use of torch's pytree API and of torch.distributed.nn.functional.all_gather (its
#   all_gather under seed_parallel), both deprecated in torch 2.13 (no code of ours involved);
# - "IterableDataset has __len__": it concerns worker processes, and RoundStream is always loaded
#   with num_workers=0 (its __len__ gives Lightning the horizon T, which resume relies on);
# - "resuming from a checkpoint that ended before the epoch ended and your dataloader is not
#   resumable": Lightning checks only for a stateful DataLoader, but the stream resumes exactly at
#   the checkpoint's round (DuelingLoop.on_load_checkpoint sets RoundStream's start_round; proved by
#   tests/machinery/test_resume.py), so the warning's "unreliable results" would be false;
# - "callbacks used to create the checkpoint need to be provided ...: ['Timer']": a run stopped by
#   trainer.max_time, resumed without it; the Timer's state is only the time used so far; and
#   ['RoundCheckpoint...']: a run going on with trainer.enable_checkpointing false, which saves nothing more;
# - "configure_optimizers returned None, this fit will run with no optimizer": the linear baselines
#   (CoLSTIM, VACDB, MaxInP, the random pair) fit their estimates in closed form or by their own solver.
# - "ModelCheckpoint with manual optimization and every_n_train_steps ... the model state AFTER optimization"
#   (a user's own ModelCheckpoint in trainer.callbacks): a round's state after its update is what a checkpoint
#   of a round holds; such a file resumes exactly (tests/machinery/test_resume.py).
# - "Precision bf16-mixed is not supported by the model summary ... Using 32 bits instead": under mixed precision
#   the parameters are float32, so the size the summary prints is the right one.
QUIET = (
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",
    r"torch.distributed.nn.functional.all_gather is deprecated",
    r"Your `IterableDataset` has `__len__` defined",
    r"You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable",
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
    r"`Trainer` instantiation. Please add the following callbacks: \['Timer'\]\.$",
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
    r"`Trainer` instantiation. Please add the following callbacks: \[\"RoundCheckpoint\{.*\}\"\]\.$",
    r"`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer",
    r"Using ModelCheckpoint with manual optimization and every_n_train_steps, but no pre-optimization state",
    r"Precision bf16-mixed is not supported by the model summary",
)


# Lightning's notes on every run that say nothing of this run (its config.yaml and summary line do): the seed
# (kept in config.yaml), which accelerators exist (the summary line names the device), a tip to install another
# logger or uploader, and that the one epoch ended (a run is one epoch of T rounds).
NOTES = (
    "Seed set to ",
    "GPU available: ",
    "TPU available: ",
    "\N{ELECTRIC LIGHT BULB} Tip: ",
    "`Trainer.fit` stopped: `max_epochs=1` reached.",
)
NOTE_LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
)


class _DropNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(note in text for note in NOTES)


def quiet_lightning() -> None:
    """Lightning's warnings of :data:`QUIET` and its notes of :data:`NOTES` left out (``NVLDB_LIGHTNING_NOTES=1``
    keeps the notes); once per process, whoever calls it."""
    for message in QUIET:
        warnings.filterwarnings("ignore", message=message)
    if os.environ.get("NVLDB_LIGHTNING_NOTES") == "1":
        return
    for name in NOTE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNotes) for f in logger.filters):
            logger.addFilter(_DropNotes())


def rank_prefix() -> str:
    """``[rank: r] `` in a process of global rank r > 0 (as Lightning marks its own lines): under
    ``seed_parallel`` a refusal every rank makes is printed by each, and a rank's own failure says whose
    (before the processes meet: the rank torchrun or srun gave the process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
    else:
        rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
        rank = int(rank) if rank.isdigit() else 0
    return f"[rank: {rank}] " if rank else ""


def end_progress_line() -> None:
    """An error in the middle of a run leaves Lightning's progress bar open, its line unended: close it,
    so that the error starts a line of its own."""
    from tqdm import tqdm

    for bar in list(tqdm._instances):
        bar.close()
