// Package bench is loomgate's load rig: it drives a URL with a fixed number
// of virtual users (closed loop) or at a fixed arrival rate (open loop),
// measures throughput and latency over a window, reads a loomgate sidecar's
// own account of queue and service time when one is in front, checks every
// closed-loop row against the physics of a closed loop, and writes the
// results as a markdown table, CSV, JSON and a self-contained HTML report.
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
// evaluated at every reading. OpenScenario is the open-loop counterpart of
// Scenario: rates instead of levels.
//
// # Scenarios
//
// Scenarios are data: a path on the stub, levels of concurrency and arms,
// each arm a sidecar configuration (fixed or unbounded admission) and a stub
// configuration. RunScenario asks a Launcher, declared here and implemented
// by the loomgate command, for a fresh target per level, so no level inherits
// another's backlog.
package bench
