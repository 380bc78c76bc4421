-- wrk script: send N pipelined GET requests of the URL's path per write (default 16).
--   wrk -t1 -c100 -d10s -s bench/pipeline.lua http://127.0.0.1:8080/ -- 16
-- wrk counts every response, so Requests/sec is responses per second.
init = function(args)
   local depth = tonumber(args[1]) or 16
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format(nil, wrk.path)
   end
   req = table.concat(r)
end

request = function()
   return req
end
