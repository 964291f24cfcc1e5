import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { needsRestart, PYTHON_ENTRY, readSettings, serverCommand, serverOptions } from "../src/settings";

const from = (values: Record<string, unknown>) => (key: string) => values[key];

test("defaults: embedded model, local backend, `recap serve` from the PATH", () => {
  const settings = readSettings(from({}));
  assert.deepEqual(serverOptions(settings), { model: "embedded", backend: "local" });
  assert.deepEqual(serverCommand(settings), { command: "recap", args: ["serve"] });
});

test("every protocol option is passed through and empty ones are left out", () => {
  const settings = readSettings(
    from({
      model: "openai:qwen@http://localhost:8000/v1",
      endpoint: " http://gpu:8000/v1 ",
      apiKey: "",
      backend: "docker",
      summarizeAt: 6000,
      hardLimit: 8000,
      maxSteps: 0,
      sessionsDir: "/tmp/sessions",
      adapterDir: "",
      confirmAccept: true,
      trace: { server: "off" },
    }),
  );
  assert.deepEqual(serverOptions(settings), {
    model: "openai:qwen@http://localhost:8000/v1",
    endpoint: "http://gpu:8000/v1",
    backend: "docker",
    summarizeAt: 6000,
    hardLimit: 8000,
    sessionsDir: "/tmp/sessions",
    confirmAccept: true,
  });
});

test("server command: explicit command line, else the python path", () => {
  assert.deepEqual(serverCommand(readSettings(from({ serverCommand: ["/opt/recap", "serve", "-v"], pythonPath: "/py" }))), {
    command: "/opt/recap",
    args: ["serve", "-v"],
  });
  assert.deepEqual(serverCommand(readSettings(from({ pythonPath: "/venv/bin/python" }))), {
    command: "/venv/bin/python",
    args: ["-c", PYTHON_ENTRY, "serve"],
  });
});

test("bad values name the setting", () => {
  assert.throws(() => readSettings(from({ backend: "k8s" })), /recap.backend must be "local" or "docker"/);
  assert.throws(() => readSettings(from({ summarizeAt: -3 })), /recap.summarizeAt must be a positive whole number/);
  assert.throws(() => readSettings(from({ serverCommand: "recap serve" })), /recap.serverCommand must be a list of strings/);
  assert.throws(() => readSettings(from({ model: 3 })), /recap.model must be a string/);
});

test("only a new command line needs a restart", () => {
  const base = readSettings(from({}));
  assert.equal(needsRestart(base, readSettings(from({ model: "hf:/m" }))), false);
  assert.equal(needsRestart(base, readSettings(from({ pythonPath: "/py" }))), true);
});

test("every setting read is declared in package.json", () => {
  const manifest = JSON.parse(readFileSync(join(__dirname, "..", "..", "package.json"), "utf8"));
  const declared = Object.keys(manifest.contributes.configuration.properties).map((key) => key.replace(/^recap\./, ""));
  const read: string[] = [];
  readSettings((key) => {
    read.push(key);
    return undefined;
  });
  assert.deepEqual(read.filter((key) => !declared.includes(key)), []);
  assert.ok(read.length >= 10, read.join());
});
