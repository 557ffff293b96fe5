// Package stub is an upstream for experiments: an HTTP service whose cost per
// request is chosen by the caller, so that what a concurrency policy does in
// front of it can be predicted and then measured.
//
// Every request runs on its own goroutine (fasthttp's model), so the stub
// itself imposes no limit unless one is asked for. The endpoints are:
//
//	/wait?ms=N        block N ms, like a slow downstream API; with &to=M, a
//	                  delay drawn evenly from N to M ms (also /db and /pinned)
//	/cpu?iters=N      N rounds of pure CPU work; the result is returned so it
//	                  cannot be optimised away
//	/db?ms=N          hold one of Config.DBPool "connections" for N ms, waiting
//	                  FIFO for one: pool 10 at 200 ms caps throughput at 50 rps
//	/mem?kb=N&ms=M    allocate and touch N KiB, hold it M ms (ms defaults to 0)
//	/pinned?ms=N      N ms inside one global critical section: a hidden
//	                  capacity of 1, like blocking inside synchronized on an old JVM
//	/mixed            15 ms, 180 ms and 5 ms in sequence: the shape of an order
//	                  service (look-up, downstream call, write)
//	/ws?ms=N&iters=M  WebSocket echo: each message answered after a pool
//	                  worker (with Config.Pool), N ms and M rounds of CPU
//	HTTP/2 (h2c)      on the same port: gRPC calls to loomgate.stub.v1.Stub's
//	                  Wait and CPU, which take a StringValue query ("ms=200",
//	                  "iters=1000") and answer what /wait and /cpu do, and to
//	                  grpc.health.v1; any other request as over HTTP/1.1
//	/pool?size=N      resize the hidden pool (Config.Pool) to N workers from
//	                  now on: a capacity that changes mid-run
//	/metrics          Prometheus text format: process and Go runtime collectors,
//	                  loomgate_stub_in_flight, loomgate_stub_requests_total{path}
//	                  and the occupancy of the hidden pools
//
// With Config.Pool set, every request but /metrics first waits FIFO for one of
// Pool workers, like a servlet container's thread pool. That is a hidden
// ceiling a sidecar in unbounded mode can watch the upstream hit.
//
// Parameters are whole decimal numbers: ms from 0 to 600000, iters from 0 to
// 10000000000, kb from 0 to 1048576. Anything else is answered 400 with a
// plain-text body naming the parameter and what is accepted, before any pool
// is waited for.
package stub
