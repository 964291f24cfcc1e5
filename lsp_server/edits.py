"""Turn an accepted proposal into one LSP `WorkspaceEdit`, rebased onto what the user has now.

For every chosen file the user's current text (the open buffer, else the file on disk) is compared
with the text the run started from. Unchanged: the agent's edits apply as they are. Changed: the
change is rebased with a three-way merge (`lsp_server.merge.merge3`); when the user's edits overlap
the agent's, the file is a conflict and nothing at all is sent. Open documents are edited at their
current version, closed ones with `version: null`; new and deleted files become `CreateFile` /
`DeleteFile` operations. Every change carries the annotation `recap`; its `needsConfirmation` is
set only when the user asked to review an accepted change once more (`confirm`): accepting is the
user's confirmation already.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

from lsprotocol import types

from lsp_server.merge import merge3, text_edits
from lsp_server.proposal import ProposedFile

ANNOTATION = "recap"

DocumentChange = Union[types.TextDocumentEdit, types.CreateFile, types.RenameFile, types.DeleteFile]
Current = Callable[[str], tuple[Union[str, None], Union[int, None], bool]]


@dataclass(frozen=True)
class EditPlan:
    """The edit to send, or the reasons it cannot be sent.

    Attributes:
        edit: the workspace edit (meaningless when `conflicts` is not empty).
        conflicts: one readable reason per file that cannot be changed safely.
        inserted: path -> the non-blank lines (stripped) the edit writes, for the "kept" check.
    """

    edit: types.WorkspaceEdit
    conflicts: list[str] = field(default_factory=list)
    inserted: dict[str, list[str]] = field(default_factory=dict)


def read_disk(path: Path) -> str | None:
    """A file's text, None when it does not exist (or cannot be decoded as UTF-8)."""
    try:
        return path.read_bytes().decode("utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError):
        return None


def _document_edit(uri: str, version: int | None, before: str, after: str) -> types.TextDocumentEdit:
    return types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
        edits=[
            types.AnnotatedTextEdit(range=e.range, new_text=e.new_text, annotation_id=ANNOTATION)
            for e in text_edits(before, after)
        ],
    )


def _lines(edit: types.TextDocumentEdit) -> list[str]:
    return [line.strip() for e in edit.edits for line in e.new_text.splitlines() if line.strip()]


def plan_edit(
    files: list[ProposedFile],
    *,
    current: Current,
    uri: Callable[[str], str],
    label: str,
    confirm: bool = False,
) -> EditPlan:
    """Build the workspace edit for `files`.

    Args:
        files: the chosen files of a proposal.
        current: path -> (the user's text now or None when absent, the open document's version or
            None, whether it is open).
        uri: path -> document URI.
        label: shown by the client with the change (its undo entry, its preview).
        confirm: mark the change `needsConfirmation` (VS Code then shows its refactor preview
            before applying).
    """
    changes: list[DocumentChange] = []
    conflicts: list[str] = []
    inserted: dict[str, list[str]] = {}
    for f in files:
        text, version, is_open = current(f.path)
        target = uri(f.path)
        if f.status == "modified":
            assert f.original is not None and f.proposed is not None
            if text is None:
                conflicts.append(f"{f.path} was deleted (or is not UTF-8) since the run started")
                continue
            merged = merge3(f.original, text, f.proposed)
            if merged is None:
                conflicts.append(f"{f.path}: your edits since the run started overlap the proposed change")
                continue
            if merged != text:
                edit = _document_edit(target, version if is_open else None, text, merged)
                changes.append(edit)
                inserted[f.path] = _lines(edit)
        elif f.status == "added":
            assert f.proposed is not None
            if text is not None and text != f.proposed:
                conflicts.append(f"{f.path} now exists with other content; not overwriting it")
                continue
            if text is None:
                changes.append(types.CreateFile(uri=target, annotation_id=ANNOTATION,
                                                options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)))
                edit = _document_edit(target, None, "", f.proposed)
                changes.append(edit)
                inserted[f.path] = _lines(edit)
        else:
            if text is not None and text != f.original:
                conflicts.append(f"{f.path} changed since the run started; not deleting it")
                continue
            if text is not None:
                changes.append(types.DeleteFile(uri=target, annotation_id=ANNOTATION,
                                                options=types.DeleteFileOptions(ignore_if_not_exists=True)))
    edit = types.WorkspaceEdit(
        document_changes=changes,
        change_annotations={
            ANNOTATION: types.ChangeAnnotation(label=label, needs_confirmation=confirm,
                                               description="a change proposed by the recap agent"),
        },
    )
    return EditPlan(edit=edit, conflicts=conflicts, inserted=inserted)
