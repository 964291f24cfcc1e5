-- nvim --clean --headless -l tests/e2e.lua : the plugin against the real `recap serve` with a
-- scripted policy. The server runs through `python = $RECAP_PYTHON` when that is set, else as
-- `recap serve` from the PATH.
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local recap = require("recap")
local ui = require("recap.ui")

local TIMEOUT_MS = 45000

local python = os.getenv("RECAP_PYTHON")

local function tool_call(name, args)
  return ("<tool_call>\n%s\n</tool_call>"):format(vim.json.encode({ name = name, arguments = args }))
end

local root = vim.fn.tempname()
local ws = root .. "/ws"
vim.fn.mkdir(ws, "p")
vim.fn.writefile({ "def add(a, b):", "    return a - b" }, ws .. "/calc.py")
local function git(...)
  local result = vim.system({ "git", ... }, {
    cwd = ws,
    env = { GIT_AUTHOR_NAME = "t", GIT_AUTHOR_EMAIL = "t@e", GIT_COMMITTER_NAME = "t", GIT_COMMITTER_EMAIL = "t@e" },
  }):wait()
  H.ok(result.code == 0, "git failed: " .. (result.stderr or ""))
end
git("init", "-q")
git("add", ".")
git("commit", "-qm", "init")

local function script(name, turns)
  local path = root .. "/" .. name
  vim.fn.writefile({ vim.json.encode(turns) }, path)
  return "scripted:" .. path
end

local fix = script("fix.json", {
  tool_call("edit_file", { path = "calc.py", old_string = "return a - b", new_string = "return a + b" }),
  tool_call("finish", { message = "add adds now" }),
})

-- what a statusline showing require("recap").statusline() displays, sampled on each progress
local statuslines = {}
vim.api.nvim_create_autocmd("LspProgress", {
  callback = function()
    vim.schedule(function()
      table.insert(statuslines, recap.statusline())
    end)
  end,
})

local function log()
  return table.concat(ui.log_lines, "\n")
end

local function session_state(id)
  local s = id and recap.state.sessions[id]
  return s and s.state
end

local function run_to_finish(command)
  local before = recap.state.last_run
  vim.cmd(command)
  H.wait(TIMEOUT_MS, function()
    return recap.state.last_run ~= before
  end, "the session id", log)
  local id = recap.state.last_run
  H.wait(TIMEOUT_MS, function()
    local state = session_state(id)
    return state ~= nil and state ~= "running"
  end, "the run to end", log)
  H.eq(session_state(id), "finished", "state after the run\n" .. log())
  return id
end

recap.setup({ python = python, model = fix, sessions_dir = root .. "/sessions" })
vim.cmd.edit(ws .. "/calc.py")
local buf = vim.api.nvim_get_current_buf()

H.test("the server starts through vim.lsp.enable for the opened buffer", function()
  H.wait(TIMEOUT_MS, function()
    local clients = vim.lsp.get_clients({ name = "recap", bufnr = buf })
    return #clients == 1 and clients[1].initialized
  end, "the recap client to attach")
  H.eq(#vim.lsp.get_clients({ name = "recap" }), 1, "one recap client")
  local client = vim.lsp.get_clients({ name = "recap" })[1]
  H.eq(client.root_dir, ws, "workspace folder")
  local offered = client.server_capabilities.executeCommandProvider.commands
  for _, command in pairs(recap.server_commands) do
    H.ok(vim.list_contains(offered, command), command .. " not offered: " .. vim.inspect(offered))
  end
end)

H.test(":checkhealth recap finds recap and a server that answers", function()
  vim.cmd("checkhealth recap")
  local report = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  vim.cmd("bwipeout")
  for _, expected in ipairs({ "importable from " .. python, "recap serve answers initialize", "model spec: scripted:" }) do
    H.ok(report:find(expected, 1, true), ("health report lacks %q:\n%s"):format(expected, report))
  end
  H.ok(not report:find("ERROR", 1, true), report)
end)

H.test(":Recap on a range -> progress -> diff preview -> :RecapAccept changes the buffer", function()
  local id = run_to_finish("1,2Recap make add add")
  local session = recap.state.sessions[id]
  H.eq(session.task, "make add add", "task")
  local kinds = vim.tbl_map(function(v)
    return v.kind
  end, session.progress)
  H.eq(kinds[1], "begin", "first progress value")
  H.ok(vim.list_contains(kinds, "report"), "progress reports: " .. vim.inspect(session.progress))
  H.wait(TIMEOUT_MS, function()
    return recap.state.current == id and ui.previews[id] ~= nil
  end, "the diff preview", log)
  local tab = ui.previews[id][1]
  local proposed
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do
    H.ok(vim.wo[win].diff, "preview windows are in diff mode")
    local b = vim.api.nvim_win_get_buf(win)
    if vim.api.nvim_buf_get_name(b):find("/proposed/calc.py", 1, true) then
      proposed = vim.api.nvim_buf_get_lines(b, 0, -1, false)
    end
  end
  H.eq(proposed, { "def add(a, b):", "    return a + b" }, "previewed proposal")
  H.eq(vim.api.nvim_buf_get_lines(buf, 0, -1, false), { "def add(a, b):", "    return a - b" }, "buffer before accepting")
  H.ok(vim.tbl_contains(statuslines, "recap: " .. (session.progress[2] and session.progress[2].message or "")), vim.inspect(statuslines))

  vim.cmd("RecapAccept")
  H.wait(TIMEOUT_MS, function()
    return session_state(id) == "accepted" and ui.previews[id] == nil
  end, "the accept", log)
  H.eq(vim.api.nvim_buf_get_lines(buf, 0, -1, false), { "def add(a, b):", "    return a + b" }, "buffer after accepting")
  H.eq(ui.previews[id], nil, "preview closed")
  H.eq(#vim.api.nvim_list_tabpages(), 1, "only the editing tab is left")
  H.eq(recap.statusline(), "", "statusline once idle")
end)

H.test("setup{} again switches the model; :RecapReject leaves buffer and disk alone", function()
  recap.setup({
    python = python,
    model = script("notes.json", {
      tool_call("write_file", { path = "NOTES.md", content = "notes\n" }),
      tool_call("finish", { message = "wrote notes" }),
    }),
    sessions_dir = root .. "/sessions",
  })
  local before = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local id = run_to_finish("Recap write notes")
  H.wait(TIMEOUT_MS, function()
    return ui.previews[id] ~= nil
  end, "the diff preview", log)
  vim.cmd("RecapReject")
  H.wait(TIMEOUT_MS, function()
    return session_state(id) == "rejected" and ui.previews[id] == nil
  end, "the reject", log)
  H.eq(vim.api.nvim_buf_get_lines(buf, 0, -1, false), before, "buffer untouched")
  H.eq(vim.fn.filereadable(ws .. "/NOTES.md"), 0, "no file written")
  H.eq(ui.previews[id], nil, "preview closed")
end)

H.test(":RecapAccept of a new file opens it with the proposed text", function()
  local id = run_to_finish("Recap write notes")
  H.wait(TIMEOUT_MS, function()
    return ui.previews[id] ~= nil
  end, "the diff preview", log)
  vim.cmd("RecapAccept")
  H.wait(TIMEOUT_MS, function()
    return session_state(id) == "accepted" and ui.previews[id] == nil
  end, "the accept", log)
  local notes = vim.fn.bufnr(ws .. "/NOTES.md")
  H.ok(notes > 0, "no buffer for NOTES.md")
  H.eq(vim.api.nvim_buf_get_lines(notes, 0, -1, false), { "notes" }, "new file's buffer")
  vim.api.nvim_buf_call(notes, function()
    vim.cmd("silent write")
  end)
  local file = assert(io.open(ws .. "/NOTES.md", "rb"))
  H.eq(file:read("*a"), "notes\n", "saved new file")
  file:close()
end)

H.test(":RecapCancel stops a running task", function()
  -- ten 2-second steps (distinct, so the loop guard stays out of it); the agent sees the cancel
  -- between steps
  local naps = {}
  for i = 1, 10 do
    naps[i] = tool_call("run_command", { command = ("sleep 2 # nap %d"):format(i) })
  end
  table.insert(naps, tool_call("finish", { message = "slept" }))
  recap.setup({
    python = python,
    model = script("slow.json", naps),
    sessions_dir = root .. "/sessions",
  })
  local before = recap.state.last_run
  vim.cmd("Recap sleep")
  H.wait(TIMEOUT_MS, function()
    return recap.state.last_run ~= before
  end, "the session id", log)
  local id = recap.state.last_run
  H.wait(TIMEOUT_MS, function()
    return log():find("[" .. ui.short(id) .. "] turn 0", 1, true) ~= nil
  end, "the first turn", log)
  vim.cmd("RecapCancel")
  H.wait(TIMEOUT_MS, function()
    return session_state(id) == "cancelled"
  end, "the cancel", log)
end)

H.test(":RecapLog shows the event stream", function()
  vim.cmd("RecapLog")
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  H.eq(vim.api.nvim_buf_get_name(0), "recap://log", "log buffer")
  local text = table.concat(lines, "\n")
  for _, expected in ipairs({ "state: running", "-> edit_file", "final: finish", "state: accepted", "state: rejected", "state: cancelled" }) do
    H.ok(text:find(expected, 1, true), ("log lacks %q:\n%s"):format(expected, text))
  end
end)

for _, client in ipairs(vim.lsp.get_clients({ name = "recap" })) do
  client:stop()
end
vim.wait(5000, function()
  return #vim.lsp.get_clients({ name = "recap" }) == 0
end)
vim.fn.delete(root, "rf")
