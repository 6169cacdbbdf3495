-- wrk script: every request carries what the harness sends, a unique x-request-id (so the
-- fault-server's ledger tracks each one), x-chaos-attempt and x-chaos-policy.
--   wrk -t1 -c64 -d10s -s bench/headers.lua http://127.0.0.1:18080/
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  prefix = "bench-" .. tid .. "-"
  counter = 0
end

function request()
  counter = counter + 1
  return wrk.format("GET", "/items/1", {
    ["x-request-id"] = prefix .. counter,
    ["x-chaos-attempt"] = "1",
    ["x-chaos-policy"] = "bench",
  })
end
