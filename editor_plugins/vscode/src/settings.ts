/**
 * Settings mapping: the `recap.*` settings -> how to start the server and the
 * `initializationOptions` / `workspace/configuration` object it reads (docs/lsp-protocol.md,
 * "Configuration"). Pure, no `vscode`: the extension passes `getConfiguration("recap").get`.
 */

export type Backend = "local" | "docker";

export interface ExtensionSettings {
  /** Full command line of the server, e.g. `["recap", "serve"]`; empty: derived from `pythonPath`. */
  serverCommand: string[];
  /** Python with recap installed; runs the server when `serverCommand` is empty. */
  pythonPath: string;
  model: string;
  endpoint: string;
  apiKey: string;
  backend: Backend;
  summarizeAt: number | null;
  hardLimit: number | null;
  maxSteps: number | null;
  sessionsDir: string;
  adapterDir: string;
  /** Review an accepted change in VS Code's refactor preview before it is applied. */
  confirmAccept: boolean;
}

/** Exactly the configuration object of the protocol; absent keys take the server's defaults. */
export interface ServerOptions {
  model: string;
  backend: Backend;
  endpoint?: string;
  apiKey?: string;
  summarizeAt?: number;
  hardLimit?: number;
  maxSteps?: number;
  sessionsDir?: string;
  adapterDir?: string;
  confirmAccept?: boolean;
}

export const DEFAULT_MODEL = "embedded";

function text(get: (key: string) => unknown, key: string): string {
  const value = get(key);
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw new Error(`recap.${key} must be a string, got ${JSON.stringify(value)}`);
  return value.trim();
}

function positive(get: (key: string) => unknown, key: string): number | null {
  const value = get(key);
  if (value === undefined || value === null || value === "" || value === 0) return null;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new Error(`recap.${key} must be a positive whole number (0 or empty: server default), got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Read and check the `recap.*` settings.
 * @param get looks up one key of the `recap` section (`undefined` when unset).
 * @throws Error naming the setting when a value has the wrong type.
 */
export function readSettings(get: (key: string) => unknown): ExtensionSettings {
  const command = get("serverCommand") ?? [];
  if (!Array.isArray(command) || !command.every((part) => typeof part === "string")) {
    throw new Error(`recap.serverCommand must be a list of strings, e.g. ["recap", "serve"], got ${JSON.stringify(command)}`);
  }
  const backend = text(get, "backend") || "local";
  if (backend !== "local" && backend !== "docker") {
    throw new Error(`recap.backend must be "local" or "docker", got ${JSON.stringify(backend)}`);
  }
  return {
    serverCommand: (command as string[]).filter((part) => part.length > 0),
    pythonPath: text(get, "pythonPath"),
    model: text(get, "model") || DEFAULT_MODEL,
    endpoint: text(get, "endpoint"),
    apiKey: text(get, "apiKey"),
    backend,
    summarizeAt: positive(get, "summarizeAt"),
    hardLimit: positive(get, "hardLimit"),
    maxSteps: positive(get, "maxSteps"),
    sessionsDir: text(get, "sessionsDir"),
    adapterDir: text(get, "adapterDir"),
    confirmAccept: get("confirmAccept") === true,
  };
}

/** The server's configuration object: the protocol's keys only, unset ones left out. */
export function serverOptions(settings: ExtensionSettings): ServerOptions {
  const options: ServerOptions = { model: settings.model, backend: settings.backend };
  if (settings.endpoint) options.endpoint = settings.endpoint;
  if (settings.apiKey) options.apiKey = settings.apiKey;
  if (settings.summarizeAt !== null) options.summarizeAt = settings.summarizeAt;
  if (settings.hardLimit !== null) options.hardLimit = settings.hardLimit;
  if (settings.maxSteps !== null) options.maxSteps = settings.maxSteps;
  if (settings.sessionsDir) options.sessionsDir = settings.sessionsDir;
  if (settings.adapterDir) options.adapterDir = settings.adapterDir;
  if (settings.confirmAccept) options.confirmAccept = true;
  return options;
}

/** Runs the `recap` command line from a given Python (like the `recap` console script does). */
export const PYTHON_ENTRY = "from recap.cli import app; app(prog_name='recap')";

/** How to start `recap serve` over stdio: `serverCommand`, else the CLI through `pythonPath`,
 * else `recap serve` from the PATH. */
export function serverCommand(settings: ExtensionSettings): { command: string; args: string[] } {
  if (settings.serverCommand.length > 0) {
    const [command, ...args] = settings.serverCommand;
    return { command: command!, args };
  }
  if (settings.pythonPath) return { command: settings.pythonPath, args: ["-c", PYTHON_ENTRY, "serve"] };
  return { command: "recap", args: ["serve"] };
}

/** Whether going from `before` to `after` needs a server restart (a new command line). */
export function needsRestart(before: ExtensionSettings, after: ExtensionSettings): boolean {
  return JSON.stringify(serverCommand(before)) !== JSON.stringify(serverCommand(after));
}
