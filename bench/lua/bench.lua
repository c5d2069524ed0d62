-- wrk script shared by every run of the Weir benchmark.
--
-- * done() prints one machine-readable line (prefix WRKJSON) with the counts and the latency
--   percentiles, p99.9 included (wrk --latency stops at p99).
-- * When WEIR_BENCH_PATHS names a file (one request path per line), request() cycles through
--   those paths, so the load is spread evenly over many routes. Requests are pre-formatted in
--   init() so the per-request Lua cost is one table lookup. Without the variable no request()
--   is defined and wrk sends its static request (no Lua on the hot path).

local paths_file = os.getenv("WEIR_BENCH_PATHS")

if paths_file and paths_file ~= "" then
  local reqs, n, i = nil, 0, 0

  init = function(args)
    reqs = {}
    for line in io.lines(paths_file) do
      if line ~= "" then
        reqs[#reqs + 1] = wrk.format(nil, line)
      end
    end
    n = #reqs
    i = 0
  end

  request = function()
    i = i % n + 1
    return reqs[i]
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"min": %.1f, "mean": %.1f, "max": %.1f, "stdev": %.1f, ' ..
    '"p50": %.1f, "p75": %.1f, "p90": %.1f, "p99": %.1f, "p999": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max, latency.stdev,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
