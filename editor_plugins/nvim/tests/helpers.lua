--- Shared by the headless tests: put the plugin on the runtimepath, assertions, waiting.
local H = {}

H.plugin_root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(H.plugin_root)

function H.eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    error(("%s:\n  expected %s\n  got      %s"):format(what or "values differ", vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function H.ok(condition, what)
  if not condition then
    error(what or "assertion failed", 2)
  end
end

--- Run the event loop until `condition()` holds; fail with `what` (and `details()`) after `timeout_ms`.
function H.wait(timeout_ms, condition, what, details)
  if not vim.wait(timeout_ms, condition, 20) then
    error(("timed out after %d ms waiting for %s%s"):format(timeout_ms, what, details and ("\n" .. details()) or ""), 2)
  end
end

local passed = 0

--- Run one named test; errors propagate so that `nvim -l` exits non-zero.
function H.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then
    io.stderr:write(("FAIL %s\n%s\n"):format(name, err))
    os.exit(1)
  end
  passed = passed + 1
  io.stdout:write(("ok %d - %s\n"):format(passed, name))
end

return H
