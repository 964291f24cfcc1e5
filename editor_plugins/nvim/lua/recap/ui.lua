--- recap's Neovim UI: the proposal preview (diff splits), the event log buffer and text helpers.
local M = {}

M.log_lines = {} --- every formatted recap/event line, oldest first
M.previews = {} --- session id -> tabpages showing its proposal

local LOG_NAME = "recap://log"
local MAX_LINE_CHARS = 200
local OBSERVATION_HEAD_LINES = 5

local function utf16_len(text)
  if vim.fn.has("nvim-0.11") == 1 then
    return vim.str_utfindex(text, "utf-16")
  end
  local _, units = vim.str_utfindex(text)
  return units
end

--- LSP range covering the whole lines first..last (1-based, inclusive) of `bufnr`.
function M.line_range(bufnr, first, last)
  local last_line = vim.api.nvim_buf_get_lines(bufnr, last - 1, last, false)[1] or ""
  return {
    start = { line = first - 1, character = 0 },
    ["end"] = { line = last - 1, character = utf16_len(last_line) },
  }
end

local function clip(text)
  text = tostring(text or "")
  return #text > MAX_LINE_CHARS and (text:sub(1, MAX_LINE_CHARS - 3) .. "...") or text
end

local function tokens(n)
  n = tonumber(n) or 0
  return n >= 1000 and ("%.1fk"):format(n / 1000) or tostring(n)
end

local function lines_of(text)
  local lines = vim.split(text or "", "\n", { plain = true })
  if lines[#lines] == "" then
    table.remove(lines)
  end
  return lines
end

--- The part of a session id that tells sessions apart: ids are `YYYYMMDD-HHMMSS-<8 hex>`, so the
--- random suffix; an id of another shape is used whole.
function M.short(session)
  session = tostring(session)
  return session:match("^%d%d%d%d%d%d%d%d%-%d%d%d%d%d%d%-(%x+)$") or session
end

--- Lines for one recap/event notification (see docs/lsp-protocol.md), prefixed with the short
--- session id; unknown types are shown as JSON.
function M.format_event(event)
  local head = ("[%s]"):format(M.short(event.session))
  local t = event.type
  if t == "state" then
    return { ("%s state: %s%s"):format(head, event.state, event.message and (" (" .. event.message .. ")") or "") }
  elseif t == "policy_turn" then
    local out = { ("%s turn %s: %s"):format(head, event.turn or 0, clip(lines_of(event.text)[1] or "")) }
    for _, call in ipairs(event.tool_calls or {}) do
      table.insert(out, ("    -> %s %s"):format(call.name, clip(call.arguments)))
    end
    for _, err in ipairs(event.parse_errors or {}) do
      table.insert(out, "    !! " .. clip(err))
    end
    return out
  elseif t == "observation" then
    local out = { ("%s <- %s #%s%s"):format(head, event.name, event.obs_id or 0, event.is_error and " (error)" or "") }
    local output = lines_of(event.output)
    for i = 1, math.min(#output, OBSERVATION_HEAD_LINES) do
      table.insert(out, "    " .. clip(output[i]))
    end
    if #output > OBSERVATION_HEAD_LINES then
      table.insert(out, ("    ... %d more lines"):format(#output - OBSERVATION_HEAD_LINES))
    end
    return out
  elseif t == "summary" or t == "prune" then
    local what = t == "summary" and ("summary " .. (event.index or "")) or ("pruned #" .. table.concat(event.obs_ids or {}, ", "))
    return { ("%s %s: %s -> %s tokens"):format(head, what, tokens(event.tokens_before), tokens(event.tokens_after)) }
  elseif t == "final" then
    local out = { ("%s final: %s after %s steps"):format(head, event.stop_reason, event.steps or 0) }
    for _, line in ipairs(lines_of(event.diff)) do
      table.insert(out, "    " .. line)
    end
    return out
  elseif t == "verdict" then
    return { ("%s verdict: %s%s"):format(head, event.verdict, event.reason and (" (" .. event.reason .. ")") or "") }
  end
  local rest = vim.deepcopy(event)
  rest.session, rest.type = nil, nil
  return { ("%s %s: %s"):format(head, t, clip(vim.json.encode(rest))) }
end

--- Append an event to the log (and to the log buffer when it is open).
function M.log_event(event)
  local lines = M.format_event(event)
  vim.list_extend(M.log_lines, lines)
  local buf = vim.fn.bufnr(LOG_NAME)
  if buf > 0 and vim.api.nvim_buf_is_loaded(buf) then
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, -1, -1, false, lines)
    vim.bo[buf].modifiable = false
  end
end

local function scratch(name, text, filetype)
  local old = vim.fn.bufnr(name)
  if old > 0 then
    vim.api.nvim_buf_delete(old, { force = true })
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines_of(text))
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].modifiable = false
  if filetype then
    vim.bo[buf].filetype = filetype
  end
  return buf
end

--- After a workspace edit: a file it created started as a buffer of one empty line, so the
--- inserted text "a\n" left the lines {"a", ""}, which 'eol' would write as "a\n\n". Drop that
--- trailing empty line so the buffer holds exactly the proposed text.
function M.trim_created(edit)
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.kind == "create" then
      local buf = vim.fn.bufnr(vim.uri_to_fname(change.uri))
      if buf > 0 and vim.api.nvim_buf_line_count(buf) > 1 then
        local last = vim.api.nvim_buf_get_lines(buf, -2, -1, false)[1]
        if last == "" then
          vim.api.nvim_buf_set_lines(buf, -2, -1, false, {})
          vim.bo[buf].eol = true
        end
      end
    end
  end
end

local function utf16_end(bufnr)
  local count = vim.api.nvim_buf_line_count(bufnr)
  local last = vim.api.nvim_buf_get_lines(bufnr, count - 1, count, false)[1] or ""
  return { line = count - 1, character = utf16_len(last) }
end

--- Before a workspace edit: an edit that appends at the very end of a buffer starts at the line
--- after its last one (LSP's end of a text ending in a newline). Neovim applies "b\n" there as the
--- lines {"b", ""}, and 'eol' writes an extra blank line. Rewrite such an edit to start at the end
--- of the last line and carry the newline in front ("\nb"): the same text, as Neovim sees it.
function M.fix_end_of_file(edit)
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument and change.edits then
      local fname = vim.uri_to_fname(change.textDocument.uri)
      local bufnr = vim.fn.bufadd(fname)
      if vim.fn.filereadable(fname) == 1 or vim.api.nvim_buf_is_loaded(bufnr) then
        vim.fn.bufload(bufnr)
        local count = vim.api.nvim_buf_line_count(bufnr)
        for _, e in ipairs(change.edits) do
          local s, t = e.range.start, e.range["end"]
          if s.line >= count and t.line >= count and vim.bo[bufnr].eol and e.newText:sub(-1) == "\n" then
            local at = utf16_end(bufnr)
            e.range = { start = at, ["end"] = at }
            e.newText = "\n" .. e.newText:sub(1, -2)
          end
        end
      end
    end
  end
end

--- :RecapLog: the event log in a split, kept up to date while it is open.
function M.open_log()
  local buf = vim.fn.bufnr(LOG_NAME)
  if buf <= 0 or not vim.api.nvim_buf_is_loaded(buf) then
    buf = scratch(LOG_NAME, table.concat(M.log_lines, "\n"), nil)
    vim.bo[buf].bufhidden = "hide"
  end
  vim.cmd("botright split")
  vim.api.nvim_win_set_buf(0, buf)
  return buf
end

--- One tab per changed file: the original on the left, the proposal on the right, in diff mode.
--- @param proposal table {session, diff, files = {{path, status, original, proposed}}}
--- @param opts table|nil {background: open the tabs but stay where you are (window, cursor, mode)}
function M.show_proposal(proposal, opts)
  M.close_proposal(proposal.session)
  local short = M.short(proposal.session)
  if #proposal.files == 0 then
    vim.notify(("recap %s finished without changing any file"):format(short))
    return
  end
  local background = opts and opts.background
  local home_win = vim.api.nvim_get_current_win()
  local tabs = {}
  local eventignore = vim.o.eventignore
  if background then
    -- passing through the new tabs is not the user moving: none of their window autocommands run
    vim.o.eventignore = "WinEnter,WinLeave,BufEnter,BufLeave,TabEnter,TabLeave,TabNew,TabNewEntered,TabClosed"
  end
  for _, file in ipairs(proposal.files) do
    local filetype = vim.filetype.match({ filename = file.path })
    vim.cmd("tabnew")
    table.insert(tabs, vim.api.nvim_get_current_tabpage())
    local left = scratch(("recap://%s/original/%s"):format(short, file.path), file.original, filetype)
    local spare = vim.api.nvim_get_current_buf()
    vim.api.nvim_win_set_buf(0, left)
    vim.api.nvim_buf_delete(spare, { force = true })
    vim.wo.winbar = ("original: %s"):format(file.path)
    vim.cmd("diffthis")
    vim.cmd("rightbelow vsplit")
    local right = scratch(("recap://%s/proposed/%s"):format(short, file.path), file.proposed, filetype)
    vim.api.nvim_win_set_buf(0, right)
    vim.wo.winbar = ("recap %s %s: %s   :RecapAccept / :RecapReject"):format(short, file.status, file.path)
    vim.cmd("diffthis")
  end
  M.previews[proposal.session] = tabs
  if background then
    vim.api.nvim_set_current_win(home_win)
    vim.o.eventignore = eventignore
    vim.notify(("recap %s: proposal ready in tab %d (%s)   :RecapAccept / :RecapReject"):format(
      short, vim.api.nvim_tabpage_get_number(tabs[1]), table.concat(vim.tbl_map(function(f)
        return f.path
      end, proposal.files), ", ")))
  end
end

--- Close the preview tabs of `session` (those still open).
function M.close_proposal(session)
  for _, tab in ipairs(M.previews[session] or {}) do
    if vim.api.nvim_tabpage_is_valid(tab) and #vim.api.nvim_list_tabpages() > 1 then
      vim.cmd.tabclose(vim.api.nvim_tabpage_get_number(tab))
    end
  end
  M.previews[session] = nil
end

return M
