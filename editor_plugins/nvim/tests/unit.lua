-- nvim --clean --headless -l tests/unit.lua : the plugin's pure parts (no server).
local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h") .. "/helpers.lua")
local recap = require("recap")
local ui = require("recap.ui")

H.test("options map to the protocol's configuration keys", function()
  local options = vim.tbl_deep_extend("force", recap.defaults, {
    model = "openai:qwen@http://localhost:8000/v1",
    api_key = "k",
    backend = "docker",
    summarize_at = 6000,
    sessions_dir = "/tmp/s",
  })
  H.eq(recap.server_options(options), {
    model = "openai:qwen@http://localhost:8000/v1",
    apiKey = "k",
    backend = "docker",
    summarizeAt = 6000,
    sessionsDir = "/tmp/s",
  }, "server options")
  local ok, err = pcall(recap.server_options, vim.tbl_extend("force", recap.defaults, { backend = "k8s" }))
  H.ok(not ok and err:find('backend must be "local" or "docker"', 1, true), err)
end)

H.test("server command: explicit, through the python, or recap serve", function()
  H.eq(recap.server_cmd({ cmd = { "/opt/recap", "serve" } }), { "/opt/recap", "serve" }, "explicit")
  H.eq(recap.server_cmd({ python = "/venv/bin/python" }), { "/venv/bin/python", "-c", recap.python_entry, "serve" }, "python")
  H.eq(recap.server_cmd({}), { "recap", "serve" }, "default")
end)

H.test("a line range covers whole lines, end in UTF-16 units", function()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "a = 1", "s = 'héllo 😀'", "c" })
  H.eq(ui.line_range(buf, 1, 2), { start = { line = 0, character = 0 }, ["end"] = { line = 1, character = 14 } }, "range")
end)

H.test("events are formatted for the log", function()
  local s = "20261130-101500-0123abcd"
  H.eq(ui.format_event({ session = s, type = "state", state = "failed", message = "boom" }), { "[0123abcd] state: failed (boom)" }, "state")
  H.eq(ui.format_event({
    session = s,
    type = "policy_turn",
    turn = 2,
    text = "Fixing.\nmore",
    tool_calls = { { id = "t", name = "edit_file", arguments = '{"path":"a.py"}' } },
  }), { "[0123abcd] turn 2: Fixing.", '    -> edit_file {"path":"a.py"}' }, "policy turn")
  local output = {}
  for i = 1, 7 do
    output[i] = "l" .. i
  end
  H.eq(ui.format_event({ session = s, type = "observation", name = "run_command", obs_id = 3, output = table.concat(output, "\n") }), {
    "[0123abcd] <- run_command #3",
    "    l1",
    "    l2",
    "    l3",
    "    l4",
    "    l5",
    "    ... 2 more lines",
  }, "observation")
  H.eq(ui.format_event({ session = s, type = "summary", index = 1, tokens_before = 12000, tokens_after = 900 }), {
    "[0123abcd] summary 1: 12.0k -> 900 tokens",
  }, "summary")
  H.eq(ui.format_event({ session = s, type = "final", stop_reason = "finish", steps = 2, diff = "-a\n+b\n" }), {
    "[0123abcd] final: finish after 2 steps",
    "    -a",
    "    +b",
  }, "final")
  H.eq(ui.format_event({ session = s, type = "score", verify_passed = true }), { '[0123abcd] score: {"verify_passed":true}' }, "unknown type")
end)

H.test("a proposal opens as a diff split and closes again", function()
  local tabs = #vim.api.nvim_list_tabpages()
  ui.show_proposal({
    session = "s1",
    diff = "",
    files = { { path = "pkg/calc.py", status = "modified", original = "x = 1\n", proposed = "x = 2\n" } },
  })
  H.eq(#vim.api.nvim_list_tabpages(), tabs + 1, "one tab per file")
  local wins = vim.api.nvim_tabpage_list_wins(0)
  H.eq(#wins, 2, "two windows")
  local texts = {}
  for _, win in ipairs(wins) do
    H.ok(vim.wo[win].diff, "diff mode")
    local buf = vim.api.nvim_win_get_buf(win)
    H.eq(vim.bo[buf].filetype, "python", "filetype from the path")
    table.insert(texts, vim.api.nvim_buf_get_lines(buf, 0, -1, false)[1])
  end
  table.sort(texts)
  H.eq(texts, { "x = 1", "x = 2" }, "original and proposal")
  ui.close_proposal("s1")
  H.eq(#vim.api.nvim_list_tabpages(), tabs, "preview closed")
end)

H.test("sessions started the same second have different short ids", function()
  H.eq(ui.short("20261130-101500-0123abcd"), "0123abcd", "random suffix")
  H.ok(ui.short("20261130-101500-0123abcd") ~= ui.short("20261130-101500-89abcdef"), "distinct")
  H.eq(ui.short("my-session"), "my-session", "other shapes whole")
end)

H.test("two proposals for one file preview side by side; a background preview leaves you where you are", function()
  local home = vim.api.nvim_get_current_win()
  local file = { path = "calc.py", status = "modified", original = "x = 1\n", proposed = "x = 2\n" }
  ui.show_proposal({ session = "20261130-101500-0123abcd", diff = "", files = { file } }, { background = true })
  ui.show_proposal({ session = "20261130-101500-89abcdef", diff = "", files = { file } }, { background = true })
  H.eq(vim.api.nvim_get_current_win(), home, "the cursor stays in the user's window")
  H.ok(vim.fn.bufnr("recap://0123abcd/proposed/calc.py") > 0, "first preview")
  H.ok(vim.fn.bufnr("recap://89abcdef/proposed/calc.py") > 0, "second preview")
  H.eq(#ui.previews["20261130-101500-0123abcd"], 1, "first preview's tab")
  H.ok(vim.api.nvim_tabpage_is_valid(ui.previews["20261130-101500-0123abcd"][1]), "the first preview is still open")
  ui.close_proposal("20261130-101500-0123abcd")
  ui.close_proposal("20261130-101500-89abcdef")
end)

H.test("an edit appending at the end of a buffer leaves no extra blank line", function()
  local path = vim.fn.tempname() .. ".py"
  vim.fn.writefile({ "a" }, path)
  local uri = vim.uri_from_fname(path)
  local edit = { documentChanges = { {
    textDocument = { uri = uri }, -- a closed file: version null (nil once decoded)
    edits = { { range = { start = { line = 1, character = 0 }, ["end"] = { line = 1, character = 0 } }, newText = "b\n" } },
  } } }
  ui.fix_end_of_file(edit)
  H.eq(vim.lsp.util.apply_workspace_edit(edit, "utf-16"), nil, "applied")
  local buf = vim.fn.bufnr(path)
  H.eq(vim.api.nvim_buf_get_lines(buf, 0, -1, false), { "a", "b" }, "lines")
  vim.api.nvim_buf_call(buf, function()
    vim.cmd("silent write")
  end)
  local f = assert(io.open(path, "rb"))
  H.eq(f:read("*a"), "a\nb\n", "the file as written")
  f:close()
end)

H.test("a server error is said once", function()
  H.eq(recap.error_text("recap.accept", { message = "recap.accept: session s is accepted" }),
    "recap: recap.accept failed: session s is accepted", "no doubled command name")
  H.eq(recap.error_text("recap.run", { message = "task: must not be blank" }), "recap: recap.run failed: task: must not be blank", "other messages whole")
end)

H.test(":help recap opens the plugin's help", function()
  vim.cmd.helptags(H.plugin_root .. "/doc")
  for _, tag in ipairs({ "recap", "recap-setup", ":RecapFix", "recap-health" }) do
    vim.cmd.help(tag)
    H.eq(vim.fn.expand("%:t"), "recap.txt", tag)
    vim.cmd.helpclose()
  end
end)
