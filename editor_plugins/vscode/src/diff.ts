/**
 * Diff assembly for a proposal: which documents a diff editor shows, on which virtual URIs
 * (served by the extension's content provider) and with what text. Pure, no `vscode`.
 */
import type { Proposal, ProposedFile } from "./protocol";

/** URI scheme of the content provider that serves both sides of a proposal. */
export const PROPOSAL_SCHEME = "recap-proposal";

export type Side = "original" | "proposed";

/** The parts of a virtual document URI (`vscode.Uri.from` takes exactly these). */
export interface UriParts {
  scheme: string;
  path: string;
  query: string;
}

export interface DiffEntry {
  path: string;
  title: string;
  left: UriParts;
  right: UriParts;
}

/** `recap-proposal:/src/a.py?session=S&side=proposed`: keeps the file name (so the editor picks
 * the language) and carries the session and side in the query. */
export function proposalUri(session: string, path: string, side: Side): UriParts {
  const query = new URLSearchParams({ session, side }).toString();
  return { scheme: PROPOSAL_SCHEME, path: `/${path.replace(/^\/+/, "")}`, query };
}

/** Inverse of `proposalUri`; throws on a URI it did not make. */
export function parseProposalUri(uri: { path: string; query: string }): { session: string; path: string; side: Side } {
  const params = new URLSearchParams(uri.query);
  const session = params.get("session");
  const side = params.get("side");
  if (!session || (side !== "original" && side !== "proposed")) {
    throw new Error(`not a recap proposal URI: ${uri.path}?${uri.query}`);
  }
  return { session, path: uri.path.replace(/^\/+/, ""), side };
}

/** The text of one side of one file; an absent side (added or deleted file) is empty. */
export function sideText(proposal: Proposal, path: string, side: Side): string {
  const file = proposal.files.find((f) => f.path === path);
  if (!file) throw new Error(`session ${proposal.session} proposes no change to ${path}`);
  return (side === "original" ? file.original : file.proposed) ?? "";
}

/** The diff tab's title: what recap does to the file. VS Code adds the file's name to a diff's
 * title itself ("recap proposal (calc.py)"), so naming it here would say it twice. */
function title(file: ProposedFile): string {
  return { added: "added by recap", modified: "recap proposal", deleted: "deleted by recap" }[file.status];
}

/** One diff editor per changed file: original on the left, proposal on the right. */
export function diffEntries(proposal: Proposal): DiffEntry[] {
  return proposal.files.map((file) => ({
    path: file.path,
    title: title(file),
    left: proposalUri(proposal.session, file.path, "original"),
    right: proposalUri(proposal.session, file.path, "proposed"),
  }));
}

/** `"a.py (modified), b.py (added)"`, or `"no changes"`. */
export function describeProposal(proposal: Proposal): string {
  if (proposal.files.length === 0) return "no changes";
  return proposal.files.map((f) => `${f.path} (${f.status})`).join(", ");
}
