--- recap for Neovim: starts `recap serve` through Neovim's LSP client and maps the server's
--- commands (docs/lsp-protocol.md) onto :Recap, :RecapFix, :RecapAccept, :RecapReject, :RecapCancel,
--- :RecapPreview and :RecapLog (doc/recap.txt). No agent logic lives here; the UI (diff preview,
--- log, statusline) is in recap.ui, the health check in recap.health.
local ui = require("recap.ui")

local M = {}

--- The server commands this plugin calls; a test checks them against the server's
--- executeCommandProvider.commands.
M.server_commands = {
  run = "recap.run",
  cancel = "recap.cancel",
  accept = "recap.accept",
  reject = "recap.reject",
  status = "recap.status",
  proposal = "recap.proposal",
}

local NAME = "recap"

--- Runs the `recap` command line from a given Python (like the `recap` console script does).
M.python_entry = "from recap.cli import app; app(prog_name='recap')"

--- @class recap.Options
M.defaults = {
  cmd = nil, --- string[]: the server command line; nil: `recap serve` through `python`, else from the PATH
  python = nil, --- string: a Python with recap installed
  model = "embedded", --- model spec: embedded, hf:PATH, openai:MODEL@URL, scripted:FILE.json
  endpoint = nil, --- base URL of an OpenAI-compatible endpoint
  api_key = nil,
  backend = "local", --- "local" or "docker"
  summarize_at = nil, --- context tokens at which the agent summarizes itself
  hard_limit = nil,
  max_steps = nil,
  sessions_dir = nil,
  adapter_dir = nil,
  root_markers = { ".git" }, --- the workspace folder is the nearest parent holding one (else the cwd)
  filetypes = nil, --- nil: every filetype
  preview = true, --- open the diff preview (in a new tab, without moving you) when a run finishes
}

--- Per-editor state: the options, every session seen, the last proposal shown.
M.state = {
  options = nil,
  sessions = {}, --- session id -> {task, state, token?, message?, progress = {values...}}
  current = nil, --- session whose proposal is previewed (default target of Accept/Reject)
  last_run = nil,
  progress = nil, --- last progress message, for the statusline
  progress_of_token = {}, --- work-done token of a :Recap run -> its progress values
}

local token_counter = 0

--- The server's configuration object (the protocol's keys; nil ones are left out).
--- @param opts recap.Options
function M.server_options(opts)
  if opts.backend ~= "local" and opts.backend ~= "docker" then
    error(('recap: backend must be "local" or "docker", got %s'):format(vim.inspect(opts.backend)))
  end
  return {
    model = opts.model,
    endpoint = opts.endpoint,
    apiKey = opts.api_key,
    backend = opts.backend,
    summarizeAt = opts.summarize_at,
    hardLimit = opts.hard_limit,
    maxSteps = opts.max_steps,
    sessionsDir = opts.sessions_dir,
    adapterDir = opts.adapter_dir,
  }
end

--- @param opts recap.Options
function M.server_cmd(opts)
  if opts.cmd then
    return opts.cmd
  end
  if opts.python then
    return { opts.python, "-c", M.python_entry, "serve" }
  end
  return { "recap", "serve" }
end

--- The workspace folder of `bufnr`: the nearest parent holding a root marker, else the cwd.
function M.root(bufnr, opts)
  return vim.fs.root(bufnr, opts.root_markers) or vim.fn.getcwd()
end

local function client_config(opts)
  local options = M.server_options(opts)
  return {
    name = NAME,
    cmd = M.server_cmd(opts),
    filetypes = opts.filetypes,
    root_dir = function(bufnr, on_dir)
      -- files only: not unnamed buffers, nor scratch ones such as recap's previews
      if vim.api.nvim_buf_get_name(bufnr) ~= "" and vim.bo[bufnr].buftype == "" then
        on_dir(M.root(bufnr, opts))
      end
    end,
    init_options = options,
    -- answers workspace/configuration for section "recap"
    settings = { recap = options },
    handlers = {
      ["recap/event"] = function(_, event)
        M._on_event(event)
      end,
      ["workspace/applyEdit"] = function(err, params, ctx)
        if params and params.edit then
          ui.fix_end_of_file(params.edit)
        end
        local result = vim.lsp.handlers["workspace/applyEdit"](err, params, ctx)
        if result and result.applied then
          ui.trim_created(params.edit)
        end
        return result
      end,
    },
    -- the server's code actions ("Ask recap to fix") carry recap.run: start it as :Recap does, so
    -- its progress and preview are followed like any run
    commands = {
      [M.server_commands.run] = function(command)
        M._start(command.arguments[1])
      end,
    },
    on_init = function(client)
      M._with_all_diagnostics(client)
    end,
    on_exit = function(code, signal)
      if code ~= 0 then
        vim.schedule(function()
          vim.notify(
            ("recap: the server (%s) exited with code %d%s; :checkhealth recap tells why (its stderr is in %s)"):format(
              table.concat(M.server_cmd(opts), " "),
              code,
              signal ~= 0 and (" (signal %d)"):format(signal) or "",
              vim.lsp.get_log_path()
            ),
            vim.log.levels.ERROR
          )
        end)
      end
    end,
  }
end

--- LSP diagnostics of every source (other servers, linters) on the lines first..last (0-based).
function M.diagnostics_at(bufnr, first, last)
  local found = {}
  for line = first, last do
    vim.list_extend(found, vim.diagnostic.get(bufnr, { lnum = line }))
  end
  return vim.lsp.diagnostic.from(found)
end

--- Neovim gives each server only its own diagnostics in textDocument/codeAction; recap publishes
--- none, so its "Ask recap to fix" would never be offered. Send it those of every source instead.
function M._with_all_diagnostics(client)
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method == "textDocument/codeAction" and params and params.context and params.range then
      local buf = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
      local all = M.diagnostics_at(buf, params.range.start.line, params.range["end"].line)
      if #all > #(params.context.diagnostics or {}) then
        params = vim.deepcopy(params)
        params.context.diagnostics = all
      end
    end
    return request(self, method, params, handler, bufnr)
  end
end

--- The running recap client, starting it for the current buffer when needed.
function M.client()
  local clients = vim.lsp.get_clients({ name = NAME })
  if #clients > 0 then
    -- a buffer FileType did not attach (no filetype, or filtered out): attach it so the server
    -- sees its text (didOpen) before the command
    if vim.bo.buftype == "" and not vim.lsp.buf_is_attached(0, clients[1].id) then
      vim.lsp.buf_attach_client(0, clients[1].id)
    end
    return clients[1]
  end
  if not M.state.options then
    error("recap: call require('recap').setup{} first", 0)
  end
  local problem = M.cmd_problem(M.state.options)
  if problem then
    error(problem .. " (:checkhealth recap)", 0)
  end
  local config = client_config(M.state.options)
  config.root_dir = M.root(0, M.state.options)
  local id = vim.lsp.start(config, { bufnr = 0 })
  return id and vim.lsp.get_client_by_id(id)
    or error("recap: could not start " .. table.concat(config.cmd, " ") .. " (:checkhealth recap)", 0)
end

--- Why the server command cannot run (its program is missing), else nil.
function M.cmd_problem(opts)
  local program = M.server_cmd(opts)[1]
  if vim.fn.executable(program) == 1 then
    return nil
  end
  if opts.python then
    return ("recap: python = %q is not an executable Python"):format(program)
  end
  return ("recap: %q is not on the PATH; set python = '/path/to/venv/bin/python' (or cmd) in setup{}"):format(program)
end

-- Neovim 0.11 made client methods take `self` (client:request); 0.10 has client.request.
local function request(client, method, params, handler, bufnr)
  if vim.fn.has("nvim-0.11") == 1 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function notify(client, method, params)
  if vim.fn.has("nvim-0.11") == 1 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

--- workspace/executeCommand with the single object argument every recap command takes.
--- @param command string one of M.server_commands
--- @param argument table
--- @param on_result fun(result: table) called on success; errors are reported with vim.notify
--- @param token string|nil work-done progress token
function M.execute(command, argument, on_result, token)
  local ok, client = pcall(M.client)
  if not ok then
    vim.notify(tostring(client), vim.log.levels.ERROR)
    return
  end
  local params = { command = command, arguments = { argument }, workDoneToken = token }
  request(client, "workspace/executeCommand", params, function(err, result)
    if err then
      vim.notify(M.error_text(command, err), vim.log.levels.ERROR)
      return
    end
    on_result(result)
  end, 0)
end

--- "recap.accept failed: <why>"; the server's messages already start with the command's name.
function M.error_text(command, err)
  local message = err.message or vim.inspect(err)
  local prefix = command .. ": "
  if message:sub(1, #prefix) == prefix then
    message = message:sub(#prefix + 1)
  end
  return ("recap: %s failed: %s"):format(command, message)
end

--- Ask the server to run `task`, with the buffer (and the lines first..last, 1-based) as context.
function M.run(task, first, last)
  local bufnr = vim.api.nvim_get_current_buf()
  local argument = { task = task, uri = vim.uri_from_bufnr(bufnr) }
  if first and last then
    argument.range = ui.line_range(bufnr, first, last)
  end
  M._start(argument)
end

--- recap.run with `argument` ({task, uri?, range?}), its progress followed on a token of ours.
function M._start(argument)
  local task = argument.task
  token_counter = token_counter + 1
  local token = ("recap-nvim-%d-%d"):format(vim.fn.getpid(), token_counter)
  -- progress may arrive before the reply that names the session
  local progress = {}
  M.state.progress_of_token[token] = progress
  M.execute(M.server_commands.run, argument, function(result)
    local session = M._session(result.session)
    session.task, session.token, session.progress = task, token, progress
    M.state.last_run = result.session
  end, token)
end

function M._session(id)
  M.state.sessions[id] = M.state.sessions[id] or { state = "running", progress = {} }
  return M.state.sessions[id]
end

function M._on_event(event)
  ui.log_event(event)
  if event.type ~= "state" then
    return
  end
  local session = M._session(event.session)
  session.state, session.message = event.state, event.message
  if event.state == "finished" and M.state.options.preview then
    vim.schedule(function()
      M.preview(event.session, true)
    end)
  elseif event.state == "failed" then
    vim.notify(("recap failed: %s (:RecapLog)"):format(event.message or "see the log"), vim.log.levels.ERROR)
  end
end

function M._on_progress(args)
  local client = vim.lsp.get_client_by_id(args.data.client_id)
  if not client or client.name ~= NAME then
    return
  end
  local params = args.data.params
  local value = params.value or {}
  local progress = M.state.progress_of_token[params.token]
  if progress then
    table.insert(progress, value)
  end
  M.state.progress = value.kind ~= "end" and (value.message or value.title) or nil
  vim.cmd.redrawstatus()
end

--- Statusline component: the running step, e.g. "recap: editing x.py", else "".
function M.statusline()
  return M.state.progress and ("recap: " .. M.state.progress) or ""
end

--- :RecapFix: "Ask recap to fix" the diagnostics on the cursor's line, whatever their source. The
--- task is the server's own quick fix (its textDocument/codeAction); several: pick one.
function M.fix()
  local ok, client = pcall(M.client)
  if not ok then
    vim.notify(tostring(client), vim.log.levels.ERROR)
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local line = vim.api.nvim_win_get_cursor(0)[1] - 1
  local diagnostics = M.diagnostics_at(bufnr, line, line)
  if #diagnostics == 0 then
    vim.notify("recap: no diagnostic on this line")
    return
  end
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    range = { start = { line = line, character = 0 }, ["end"] = { line = line, character = 0 } },
    context = { diagnostics = diagnostics, only = { "quickfix" } },
  }
  request(client, "textDocument/codeAction", params, function(err, actions)
    if err then
      vim.notify(M.error_text("textDocument/codeAction", err), vim.log.levels.ERROR)
      return
    end
    local fixes = vim.tbl_filter(function(a)
      return a.kind == "quickfix" and a.command and a.command.command == M.server_commands.run
    end, actions or {})
    local start = function(action)
      if action then
        M._start(action.command.arguments[1])
      end
    end
    if #fixes <= 1 then
      return start(fixes[1])
    end
    vim.ui.select(fixes, { prompt = "recap: fix which?", format_item = function(a)
      return a.title
    end }, start)
  end, bufnr)
end

--- Fetch the proposal of `session` and show it in diff splits (one tab per file). After a run
--- (`background`), the tabs open behind the one you are in: nothing you type goes astray.
function M.preview(session, background)
  M.execute(M.server_commands.proposal, { session = session }, function(proposal)
    M.state.current = session
    ui.show_proposal(proposal, { background = background })
  end)
end

--- Send a verdict command (recap.accept / recap.reject) for `session` (default: the previewed one),
--- then `after(id, result)`.
local function decide(command, session, after)
  local id = (session and session ~= "") and session or M.state.current
  if not id then
    vim.notify("recap: no proposal to act on", vim.log.levels.WARN)
    return
  end
  M.execute(command, { session = id }, function(result)
    M._session(id).state = result.state
    after(id, result)
  end)
end

function M.accept(session)
  -- The server answers with workspace/applyEdit, which Neovim's handler applies to the buffers.
  decide(M.server_commands.accept, session, function(id, result)
    if result.applied then
      ui.close_proposal(id)
      vim.notify("recap: applied " .. table.concat(result.files or {}, ", "))
    else
      vim.notify("recap: the change was not applied: " .. (result.message or "refused"), vim.log.levels.WARN)
    end
  end)
end

function M.reject(session)
  decide(M.server_commands.reject, session, function(id)
    ui.close_proposal(id)
    vim.notify(("recap: rejected the proposal of %s (nothing changed)"):format(ui.short(id)))
  end)
end

function M.cancel(session)
  local id = (session and session ~= "") and session or nil
  if not id then
    for sid, s in pairs(M.state.sessions) do
      if s.state == "running" then
        id = sid
      end
    end
  end
  if not id then
    vim.notify("recap: nothing is running")
    return
  end
  M.execute(M.server_commands.cancel, { session = id }, function(result)
    M._session(id).state = result.state
    vim.notify(("recap: %s %s"):format(ui.short(id), result.state))
  end)
end

local function define_commands()
  local command = vim.api.nvim_create_user_command
  command("Recap", function(args)
    local run = function(task)
      if task and vim.trim(task) ~= "" then
        M.run(vim.trim(task), args.range > 0 and args.line1 or nil, args.range > 0 and args.line2 or nil)
      end
    end
    if args.args ~= "" then
      run(args.args)
    else
      vim.ui.input({ prompt = "recap task: " }, run)
    end
  end, { nargs = "*", range = true, desc = "Run a recap task (a visual range is sent as context)" })
  command("RecapAccept", function(args)
    M.accept(args.args)
  end, { nargs = "?", desc = "Apply the previewed recap proposal" })
  command("RecapReject", function(args)
    M.reject(args.args)
  end, { nargs = "?", desc = "Reject the previewed recap proposal" })
  command("RecapCancel", function(args)
    M.cancel(args.args)
  end, { nargs = "?", desc = "Cancel a running recap task" })
  command("RecapLog", function()
    ui.open_log()
  end, { desc = "Show the recap event log" })
  command("RecapFix", function()
    M.fix()
  end, { desc = "Ask recap to fix the diagnostics on the cursor's line (any source)" })
  command("RecapPreview", function(args)
    local id = args.args ~= "" and args.args or M.state.current
    if not id then
      vim.notify("recap: no proposal to show", vim.log.levels.WARN)
      return
    end
    M.preview(id, false)
  end, { nargs = "?", desc = "Show (and go to) a finished recap proposal" })
end

--- Configure and enable the recap language server. Calling it again updates the options and
--- sends them to a running server (workspace/didChangeConfiguration).
--- @param opts recap.Options|nil
function M.setup(opts)
  local options = vim.tbl_deep_extend("force", M.defaults, opts or {})
  M.server_options(options) -- validate before changing anything
  M.state.options = options
  local config = client_config(options)
  if vim.lsp.config then
    vim.lsp.config(NAME, config)
    vim.lsp.enable(NAME)
  else
    vim.api.nvim_create_autocmd("FileType", {
      group = vim.api.nvim_create_augroup("RecapStart", {}),
      callback = function(args)
        if vim.bo[args.buf].buftype == "" and vim.api.nvim_buf_get_name(args.buf) ~= "" then
          local c = vim.deepcopy(config)
          c.root_dir = M.root(args.buf, options)
          vim.lsp.start(c, { bufnr = args.buf })
        end
      end,
    })
  end
  for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
    client.settings = config.settings
    notify(client, "workspace/didChangeConfiguration", { settings = config.settings })
  end
  vim.api.nvim_create_autocmd("LspProgress", {
    group = vim.api.nvim_create_augroup("RecapProgress", {}),
    callback = M._on_progress,
  })
  define_commands()
end

return M
