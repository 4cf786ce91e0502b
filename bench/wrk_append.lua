-- wrk script: one single-event append per request, POST <path> with a unique event id per request.
-- wrk ... -s bench/wrk_append.lua URL -- /streams/<stream> <20-hex nonce> "<Authorization value>"
-- The event id is the run's nonce, wrk's thread number and the thread's request counter, so every
-- request of every thread is a new event (no idempotent repeats). done() prints one JSON line.

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  path = args[1]
  nonce = args[2]
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["ES-EventType"] = "BenchEvent"
  wrk.headers["Authorization"] = args[3]
  wrk.body = '{"account":"acc-17","amount":25,"currency":"EUR","note":"single-event append from wrk",'
    .. '"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'
end

function request()
  counter = counter + 1
  -- nonce: 20 hex digits; then 2 for the thread and 10 for the counter: 8-4-4-4-12
  local id = string.format("%s-%s-%s-%s-%s%02x%010x",
    nonce:sub(1, 8), nonce:sub(9, 12), nonce:sub(13, 16), nonce:sub(17, 20), "", tid, counter)
  wrk.headers["ES-EventId"] = id
  return wrk.format(nil, path)
end

function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.status,
    summary.errors.timeout))
end
