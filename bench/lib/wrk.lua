-- wrk script of the bench (bench/lib/wrk.ts): every request comes from a file prepared by the harness,
-- one request a line: METHOD <TAB> path <TAB> Authorization header or "-" <TAB> body or "-"
-- <TAB> one more "Name: value" header or "-".
-- Each thread takes every n-th line from its own offset, so no two requests are the same (fresh
-- users and tokens); a thread that runs out starts its lines again and counts the wrap, which the
-- harness reports (a replayed token is not a fresh request). Responses are counted by status, and
-- done() prints one JSON line that the harness parses.
local threads = {}
local counter = 0

function setup(thread)
  thread:set("index", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local lines = {}
local position = 0
statuses = {}
wraps = 0

local function split(line)
  local parts = {}
  for field in string.gmatch(line, "[^\t]+") do table.insert(parts, field) end
  return parts
end

function init(args)
  local stride = tonumber(os.getenv("WRK_THREADS") or "1")
  local file = assert(io.open(os.getenv("WRK_REQUESTS"), "r"))
  local n = 0
  for line in file:lines() do
    if n % stride == index then
      local f = split(line)
      local headers = { ["Content-Type"] = "application/json" }
      if f[3] ~= "-" then headers["Authorization"] = f[3] end
      if f[5] and f[5] ~= "-" then
        local name, value = string.match(f[5], "^([^:]+): (.*)$")
        headers[name] = value
      end
      local body = nil
      if f[4] ~= "-" then body = f[4] end
      table.insert(lines, wrk.format(f[1], f[2], headers, body))
    end
    n = n + 1
  end
  file:close()
end

function request()
  position = position + 1
  if position > #lines then
    position = 1
    wraps = wraps + 1
  end
  return lines[position]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local merged = {}
  local wrapped = 0
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for status, n in pairs(counts) do merged[tostring(status)] = (merged[tostring(status)] or 0) + n end
    wrapped = wrapped + thread:get("wraps")
  end
  local parts = {}
  for status, n in pairs(merged) do table.insert(parts, string.format('"%s":%d', status, n)) end
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"durationUs":%d,"bytes":%d,"statuses":{%s},"wraps":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d},' ..
    '"latencyUs":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes, table.concat(parts, ","), wrapped,
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
