/**
 * The extension in a real VS Code workbench: code-server (Code 1.99) with the packaged
 * dist/recap.vsix installed by `--install-extension`, opened in headless Chromium and driven like a
 * user through the DevTools protocol (puppeteer-core): mouse clicks, the command palette, typing.
 *
 * The extension starts `recap serve` itself, as it does for a user: the only settings are
 * `recap.pythonPath` (RECAP_PYTHON; PYTHONPATH passes through code-server to the server), a
 * `scripted:` model (the turns come from a file the test rewrites before each run) and a sessions
 * folder. Checked: activation, the server's start, a run on a selection with its progress, the diff
 * tab, ✓ Accept with the file changed on disk, ✗ Reject, Cancel from the progress notification, and
 * what a user reads when the server cannot start (a wrong `recap.pythonPath`).
 *
 * Needs e2e/install.sh's cache (RECAP_E2E_CACHE, default ../.e2e-cache), dist/recap.vsix
 * (`npm run package`) and Chromium (CHROMIUM, default /usr/bin/chromium).
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const extensionRoot = dirname(here);
const cache = process.env.RECAP_E2E_CACHE ?? join(extensionRoot, ".e2e-cache");
const codeServer = join(cache, "node_modules/code-server/out/node/entry.js");
const vsix = join(extensionRoot, "dist/recap.vsix");
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const python = process.env.RECAP_PYTHON ?? "python3";
const { default: puppeteer } = await import(pathToFileURL(join(cache, "node_modules/puppeteer-core/lib/esm/puppeteer/puppeteer-core.js")).href);

const TIMEOUT_MS = 90_000;
const ORIGINAL = "def add(a, b):\n    return a - b\n";
const FIXED = "def add(a, b):\n    return a + b\n";

const root = mkdtempSync(join(tmpdir(), "recap-workbench-"));
const ws = join(root, "ws");
const script = join(root, "turns.json");
const sessions = join(root, "sessions");
let server;
let settingsFile;
let browser;
let page;
const serverOutput = [];

function toolCall(name, args) {
  return `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
}

/** The turns the scripted model plays in the next run. */
function nextRun(...turns) {
  writeFileSync(script, JSON.stringify(turns));
}

async function freePort() {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Poll `read()` until `ok(value)`; fail with what was seen last. */
async function until(what, read, ok = Boolean, timeoutMs = TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  let value;
  while (Date.now() < deadline) {
    value = await read();
    if (ok(value)) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
  await page?.screenshot({ path: join(tmpdir(), "recap-workbench-failure.png") }).catch(() => {});
  assert.fail(`timed out waiting for ${what}; last seen: ${JSON.stringify(value)}\n${serverOutput.join("").slice(-4000)}`);
}

/** What the editors matching `selector` show (Monaco renders spaces as no-break spaces). */
const editorTexts = (selector) => page.$$eval(selector, (els) => els.map((el) => el.innerText.replace(/\u00a0/g, " ")));
const statusBar = () => page.$eval(".part.statusbar", (el) => el.innerText);
const tabTitles = () => page.$$eval(".tabs-container .tab", (tabs) => tabs.map((t) => t.getAttribute("aria-label") ?? t.innerText));
const notifications = () => page.$$eval(".notifications-toasts .notification-toast", (ts) => ts.map((t) => t.innerText));

/** Run a command from the palette, as a user does (F1, type its title, Enter). */
async function palette(title) {
  await page.keyboard.press("F1");
  await page.waitForSelector(".quick-input-widget .quick-input-box input", { visible: true });
  await page.keyboard.type(title);
  await until(`"${title}" in the palette`, () =>
    page.$$eval(".quick-input-list .monaco-list-row", (rows) => rows.map((r) => r.getAttribute("aria-label") ?? "")),
    (rows) => rows.length > 0 && rows[0].includes(title),
  );
  await page.keyboard.press("Enter");
}

async function runTask(task) {
  await palette("recap: Run task");
  await until("the task input box", () => page.$eval(".quick-input-widget", (el) => el.innerText).catch(() => ""), (t) => t.includes("recap: run a task"));
  await page.keyboard.type(task);
  await page.keyboard.press("Enter");
}

async function clickEditorAction(label) {
  const selector = `.editor-actions .action-label[aria-label^="${label}"]`;
  await page.waitForSelector(selector, { visible: true, timeout: TIMEOUT_MS });
  await page.click(selector);
}

before(async () => {
  assert.ok(existsSync(codeServer), `code-server is not installed in ${cache}: run e2e/install.sh`);
  assert.ok(existsSync(vsix), `${vsix} is missing: npm run package`);
  mkdirSync(ws, { recursive: true });
  writeFileSync(join(ws, "calc.py"), ORIGINAL);
  const git = (...args) => execFileSync("git", args, {
    cwd: ws, env: { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@e", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@e" },
  });
  git("init", "-q");
  git("add", ".");
  git("commit", "-qm", "init");

  const userData = join(root, "user-data");
  const extensions = join(root, "extensions");
  mkdirSync(join(userData, "User"), { recursive: true });
  settingsFile = join(userData, "User/settings.json");
  writeFileSync(settingsFile, JSON.stringify({
    "recap.pythonPath": python,
    "recap.model": `scripted:${script}`,
    "recap.sessionsDir": sessions,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": false,
    "git.enabled": false,
  }));
  const common = ["--config", "/dev/null", "--user-data-dir", userData, "--extensions-dir", extensions];
  execFileSync(process.execPath, [codeServer, ...common, "--install-extension", vsix], { stdio: "pipe" });

  const port = await freePort();
  server = spawn(process.execPath, [codeServer, ...common, "--auth", "none", "--bind-addr", `127.0.0.1:${port}`,
    "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", ws], {
    env: { ...process.env }, // PYTHONPATH and the rest reach the extension host, hence `recap serve`
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  server.stdout.on("data", (d) => serverOutput.push(String(d)));
  server.stderr.on("data", (d) => serverOutput.push(String(d)));
  await until("code-server to listen", () => serverOutput.join("").includes("HTTP server listening"));

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", `--user-data-dir=${join(root, "chromium")}`],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
  await page.waitForSelector(".monaco-workbench", { timeout: TIMEOUT_MS });
});

after(async () => {
  await browser?.close();
  if (server?.pid) {
    try {
      process.kill(-server.pid, "SIGTERM"); // code-server, its extension host and `recap serve`
    } catch {}
  }
  rmSync(root, { recursive: true, force: true });
});

test("the extension activates and starts `recap serve` with the default transport", async () => {
  // the status bar item exists once activate() ran; the server's start shows in the process table
  await until("the recap status bar item", statusBar, (text) => /\brecap\b/.test(text));
  await until("a running `recap serve --stdio`", () => {
    try {
      return execFileSync("pgrep", ["-af", "recap.cli import app.*serve --stdio"], { encoding: "utf8" });
    } catch {
      return "";
    }
  });
  const toasts = await notifications();
  assert.ok(!toasts.some((t) => /recap/.test(t)), `no recap error expected: ${toasts}`);
});

test("run on a selection: progress, the diff tab, ✓ Accept changes the file on disk", async () => {
  await page.waitForSelector(".explorer-folders-view .monaco-list-row[aria-label^='calc.py']", { timeout: TIMEOUT_MS });
  await page.click(".explorer-folders-view .monaco-list-row[aria-label^='calc.py']", { count: 2 });
  await page.waitForSelector(".editor-instance .monaco-editor .view-lines", { visible: true });
  await until("calc.py in the editor", () => editorTexts(".editor-instance .monaco-editor .view-lines"),
    (texts) => texts.some((text) => text.includes("return a - b")));
  await page.click(".editor-instance .monaco-editor .view-lines");
  await page.keyboard.down("Control");
  await page.keyboard.press("KeyA"); // the selection goes along as context
  await page.keyboard.up("Control");

  nextRun(
    toolCall("run_command", { command: "sleep 3 # look around" }),
    toolCall("edit_file", { path: "calc.py", old_string: "return a - b", new_string: "return a + b" }),
    toolCall("finish", { message: "add adds now" }),
  );
  const seen = new Set();
  const sampler = setInterval(async () => {
    try {
      seen.add(await statusBar());
      for (const t of await notifications()) seen.add(t);
    } catch {}
  }, 100);
  await runTask("make add add");
  const title = await until("the diff tab", tabTitles, (tabs) => tabs.some((t) => t.includes("recap proposal")));
  clearInterval(sampler);
  const progress = [...seen].join("\n");
  assert.match(progress, /recap: make add add/, "the progress notification");
  assert.match(progress, /running sleep 3|step 1/, `a progress step:\n${progress}`);

  const diffTab = title.find((t) => t.includes("recap proposal"));
  // the tab's full title (window title, screen readers) names the file once
  assert.match(diffTab, /^recap proposal \(calc\.py\)/);
  assert.equal(diffTab.split("calc.py").length, 2, diffTab);
  await until("the proposal side of the diff", () => editorTexts(".monaco-diff-editor .monaco-editor .view-lines"),
    (sides) => sides.some((side) => side.includes("return a + b")));
  assert.equal(readFileSync(join(ws, "calc.py"), "utf8"), ORIGINAL, "nothing changes before Accept");

  await clickEditorAction("Accept proposal");
  await until("calc.py changed on disk", () => readFileSync(join(ws, "calc.py"), "utf8"), (text) => text === FIXED);
  await until("the diff tab to close", tabTitles, (tabs) => !tabs.some((t) => t.includes("recap proposal")));
  await until("the accepted state", statusBar, (text) => text.includes("recap: accepted"));
});

test("✗ Reject closes the proposal and writes nothing", async () => {
  nextRun(toolCall("write_file", { path: "NOTES.md", content: "notes\n" }), toolCall("finish", { message: "wrote notes" }));
  await runTask("write notes");
  await until("the diff tab", tabTitles, (tabs) => tabs.some((t) => t.includes("added by recap (NOTES.md)")));
  await clickEditorAction("Reject proposal");
  await until("the rejected state", statusBar, (text) => text.includes("recap: rejected"));
  await until("the diff tab to close", tabTitles, (tabs) => !tabs.some((t) => t.includes("added by recap")));
  assert.ok(!existsSync(join(ws, "NOTES.md")), "a rejected file must not be written");
});

test("Cancel in the progress notification stops the run", async () => {
  // 90 s of naps: on a loaded machine the notification can take a while to show its Cancel button
  nextRun(...Array.from({ length: 30 }, (_, i) => toolCall("run_command", { command: `sleep 3 # nap ${i}` })),
    toolCall("finish", { message: "slept" }));
  await runTask("take naps");
  const cancel = ".notifications-toasts .notification-toast .monaco-button";
  await until("the progress notification's Cancel", () =>
    page.$$eval(cancel, (buttons) => buttons.map((b) => b.innerText)), (labels) => labels.includes("Cancel"));
  const started = Date.now();
  const buttons = await page.$$(cancel);
  for (const button of buttons) {
    if ((await button.evaluate((b) => b.innerText)) === "Cancel") await button.click();
  }
  await until("the cancelled state", statusBar, (text) => text.includes("recap: cancelled"));
  assert.ok(Date.now() - started < 20_000, "the run stops well before its 90 s of naps");
});

test("a server that cannot start says what to check", async () => {
  const settings = JSON.parse(readFileSync(settingsFile, "utf8"));
  writeFileSync(settingsFile, JSON.stringify({ ...settings, "recap.pythonPath": join(root, "no-such-python") }));
  await page.reload(); // the window starts again with the settings on disk, as after a restart
  await page.waitForSelector(".monaco-workbench", { timeout: TIMEOUT_MS });
  const expected = (text) => text.includes("the recap server is not running") && text.includes("recap.pythonPath") &&
    text.includes("no-such-python");
  await until("the start failure message", async () => (await notifications()).join("\n"), expected);
  await page.click(".notifications-toasts .notification-toast .codicon-notifications-clear").catch(() => {});
  await palette("recap: Run task"); // a command that needs the server says the same, not "Client is not running"
  const text = await until("the message of Run task", async () => (await notifications()).join("\n"), expected);
  assert.ok(!text.includes("Client is not running"), text);
});
