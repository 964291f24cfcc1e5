--- :checkhealth recap: is the server command there, is recap importable (and which version), does
--- `recap serve` answer an initialize request, is the model spec one the server takes.
local M = {}

local START_TIMEOUT_MS = 60000

local function options()
  local recap = require("recap")
  return recap.state.options, recap
end

--- A Python able to import recap: the configured one, else the one the `recap` script runs.
local function python_of(opts)
  if opts.python then
    return opts.python
  end
  local cmd = require("recap").server_cmd(opts)
  local program = vim.fn.exepath(cmd[1])
  if program == "" then
    return nil
  end
  local first = (vim.fn.readfile(program, "", 1)[1] or "")
  local shebang = first:match("^#!%s*(%S+)")
  return shebang and shebang:find("python") and shebang or nil
end

local function check_model(spec)
  if spec == "embedded" or spec == "tiny" then
    return true
  end
  local kind, rest = spec:match("^(%a+):(.+)$")
  if kind == "openai" then
    return true
  elseif kind == "hf" or kind == "scripted" then
    local path = vim.fn.expand(rest)
    if vim.uv.fs_stat(path) then
      return true
    end
    return false, ("%s: %s does not exist"):format(spec, path)
  end
  return false, ("%q is not a model spec: use embedded, hf:PATH, openai:MODEL[@URL], scripted:FILE.json or tiny"):format(spec)
end

--- Start the server, send initialize / shutdown / exit on its stdin, read its answer.
local function check_server(cmd, root)
  local function frame(message)
    local body = vim.json.encode(vim.tbl_extend("force", { jsonrpc = "2.0" }, message))
    return ("Content-Length: %d\r\n\r\n%s"):format(#body, body)
  end
  local input = frame({ id = 1, method = "initialize", params = { processId = vim.NIL, rootUri = vim.uri_from_fname(root), capabilities = {} } })
    .. frame({ id = 2, method = "shutdown" })
    .. frame({ method = "exit" })
  local ok, proc = pcall(vim.system, vim.list_extend(vim.deepcopy(cmd), { "--stdio" }), { stdin = input, text = true, cwd = root })
  if not ok then
    return false, tostring(proc)
  end
  local result = proc:wait(START_TIMEOUT_MS)
  local info = (result.stdout or ""):match('"serverInfo"%s*:%s*(%b{})')
  if info then
    return true, info
  end
  local stderr = vim.trim(result.stderr or "")
  return false, ("exit code %s%s"):format(result.code, stderr ~= "" and (":\n" .. stderr:sub(-2000)) or "")
end

function M.check()
  local health = vim.health
  health.start("recap")
  local opts, recap = options()
  if not opts then
    health.error("require('recap').setup{} was not called", { "call it from your config, see :help recap-setup" })
    return
  end
  local problem = recap.cmd_problem(opts)
  local cmd = recap.server_cmd(opts)
  if problem then
    health.error(problem, { "python = '/path/to/venv/bin/python' (a Python with recap installed) in setup{}" })
    return
  end
  health.ok("server command: " .. table.concat(cmd, " "))

  local python = python_of(opts)
  if python then
    local result = vim.system({ python, "-c", "from importlib.metadata import version; import recap; print(version('recap'))" }, { text = true }):wait(30000)
    if result.code == 0 then
      health.ok(("recap %s importable from %s"):format(vim.trim(result.stdout), python))
    else
      health.error(("%s cannot import recap"):format(python), { vim.trim(result.stderr or ""), "pip install recap into that environment" })
      return
    end
  else
    health.info("no Python found to check the import with (cmd is set): skipped")
  end

  local root = vim.fs.root(0, opts.root_markers) or vim.fn.getcwd()
  local started, detail = check_server(cmd, root)
  if started then
    health.ok("recap serve answers initialize: " .. detail)
  else
    health.error("recap serve did not start: " .. detail, { "run the command above in a shell to see why" })
  end

  local valid, why = check_model(opts.model)
  if valid then
    health.ok("model spec: " .. opts.model)
  else
    health.error("model spec: " .. why)
  end
end

return M
