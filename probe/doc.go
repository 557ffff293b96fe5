// Package probe finds out, for an upstream seen only at its present
// load, whether it queues inside and what it serves at once, by admitting
// fewer for a few seconds.
//
// At one steady load a hidden pool of 37 holding 300 requests and a slow
// dependency holding 300 look the same: service time is whatever it is,
// and nothing calmer shows what it would be unloaded. Little's law tells
// them apart as soon as fewer are admitted: an upstream that serves as
// many answers a second with half the requests inside was queueing the
// other half; one that serves half as many was serving them all. So a
// probe caps admission at half of what is in flight, waits until the
// requests inside were all admitted under the cap, measures the answers
// a second, and halves again while they hold. The first step at which
// they fall is below the upstream's knee: its service time there is the
// unloaded one, and what was served before the probe, at that speed, is
// the capacity (a cap held at 1 is one too). The probe stops at that step,
// or as soon as the load it was measuring is gone, and lifts its cap.
//
// It never rejects: requests above the cap wait in loomgate's queue for
// the step's few seconds (the limiter's SetProbe). What it costs is that
// wait, and the throughput lost in the one step below the knee. The
// Controller decides when and how far; the estimate (package advice)
// reads the step below the knee as a baseline, as it reads a calm minute.
package probe
