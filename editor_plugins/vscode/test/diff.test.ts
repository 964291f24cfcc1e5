import assert from "node:assert/strict";
import { test } from "node:test";

import { describeProposal, diffEntries, parseProposalUri, PROPOSAL_SCHEME, proposalUri, sideText } from "../src/diff";
import type { Proposal } from "../src/protocol";

const proposal: Proposal = {
  session: "s-1",
  diff: "",
  files: [
    { path: "src/a.py", uri: "file:///w/src/a.py", status: "modified", original: "x = 1\n", proposed: "x = 2\n" },
    { path: "new.py", uri: "file:///w/new.py", status: "added", original: null, proposed: "print()\n" },
    { path: "old.py", uri: "file:///w/old.py", status: "deleted", original: "gone\n", proposed: null },
  ],
};

test("proposal URIs keep the file name and round-trip session and side", () => {
  const uri = proposalUri("s 1&x", "src/a.py", "proposed");
  assert.equal(uri.scheme, PROPOSAL_SCHEME);
  assert.equal(uri.path, "/src/a.py");
  assert.deepEqual(parseProposalUri(uri), { session: "s 1&x", path: "src/a.py", side: "proposed" });
});

test("a URI without session or side is refused", () => {
  assert.throws(() => parseProposalUri({ path: "/a.py", query: "session=s" }), /not a recap proposal URI/);
});

test("one diff entry per file, original on the left", () => {
  const entries = diffEntries(proposal);
  assert.deepEqual(
    entries.map((e) => [e.path, e.title]),
    [
      ["src/a.py", "recap proposal"],
      ["new.py", "added by recap"],
      ["old.py", "deleted by recap"],
    ],
  );
  const [first] = entries;
  assert.equal(sideText(proposal, parseProposalUri(first!.left).path, parseProposalUri(first!.left).side), "x = 1\n");
  assert.equal(sideText(proposal, parseProposalUri(first!.right).path, parseProposalUri(first!.right).side), "x = 2\n");
});

test("absent sides of added and deleted files are empty", () => {
  assert.equal(sideText(proposal, "new.py", "original"), "");
  assert.equal(sideText(proposal, "old.py", "proposed"), "");
  assert.throws(() => sideText(proposal, "missing.py", "original"), /proposes no change to missing.py/);
});

test("proposal description", () => {
  assert.equal(describeProposal(proposal), "src/a.py (modified), new.py (added), old.py (deleted)");
  assert.equal(describeProposal({ session: "s", diff: "", files: [] }), "no changes");
});
