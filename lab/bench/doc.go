// Package bench is loomgate's load rig: one load engine that drives a URL
// with a fixed number of virtual users (closed loop) or at a fixed arrival
// rate (open loop), measures throughput and latency over a window, reads a
// loomgate sidecar's own account of queue and service time when one is in
// front, and checks every closed-loop row against the physics of a closed
// loop. Its results are written by bench/report; the comparison with
// peers (HAProxy, nginx, a bare fasthttp proxy) is bench/overhead, the
// advice matrix bench/advicematrix.
//
// # The engine
//
// Every run goes through one engine (load.go): it opens the connections,
// sends each request with a deadline, records it with the time it was due,
// sent and answered (record.go), reads the sidecar's /metrics and the
// upstream's memory on one schedule (scrape.go), and writes the progress
// lines. Closed and open loops are two pacings of it (pacer.go); they
// differ in when a request is sent and in which requests belong to the
// window.
//
// # Closed loop
//
// Run starts Config.Concurrency virtual users. Each has its own keep-alive
// connection and sends its next request as soon as the previous one is
// answered: there is no think time, so the load is exactly C requests in
// flight, and Little's law ties throughput X and mean latency R together as
// X = C / R. A level is one separate run: an explicit warm-up, then a
// measurement window. A request counts if and only if it completes inside the
// window, whenever it was sent; successes (2xx) and errors, by kind, are
// counted apart.
//
// # Protocols
//
// Config.Proto picks what is spoken: HTTP/1.1 (fasthttp, a connection per
// closed-loop user), h2c (net/http with unencrypted HTTP/2) or gRPC (a
// unary call through a grpc ClientConn). Over HTTP/2 the requests are
// streams on Config.Conns connections that all users share, as HTTP/2
// clients send them (protocols.go); pacing and recording are the same,
// and a gRPC status is counted as the HTTP/1.1 answer it stands for.
//
// # Physics
//
// Every Result carries a Verdict from Physics.Check: unsaturated, the
// observed rps should be C / R; saturated (more users than the limit N in
// front of the work), it cannot exceed N / S, S being the service time. Rows
// more than Tolerance off are flagged with the reason, not hidden: a flagged
// row means the rig, not the system under test, may be what was measured, or
// that a limit is hiding somewhere.
//
// # Open loop
//
// RunOpen sends request i at start + i / OpenConfig.Rate whether or not the
// ones before it were answered, on an idle connection or a new one, and
// counts its latency from that due time, so a stall delays, and shows in,
// every request due during it. The requests due in the window are
// followed to their answer; those due while OpenConfig.MaxInFlight are in
// flight are counted as not sent, never queued by the rig. With a sidecar,
// its queue is read over the run and the queue-time alert's expression
// evaluated at every reading.
//
// # Scenarios
//
// Scenarios are data: a table of experiments, each a path on the stub,
// levels of concurrency (closed loop) or arrival rates (open loop), and
// arms, each arm a sidecar configuration (fixed or unbounded admission) and
// a stub configuration. RunScenario and RunOpenScenario ask a Launcher,
// declared here and implemented by the loomgate command, for a fresh target
// per run, so no run inherits another's backlog. The processes the rig
// starts itself go through Command: SIGTERM, then a kill after a grace
// period.
package bench
