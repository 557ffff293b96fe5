package metrics

import "time"

// Figures are what the window measured: the inputs of the advice.
type Figures struct {
	// Span is the time the figures cover: Window, or less when traffic
	// began more recently.
	Span time.Duration
	// Requests counts admitted requests finished in the window, and
	// Rejected the requests admission refused.
	Requests, Rejected int64
	// ArrivalRate is requests reaching admission per second, counted as
	// they finish; Throughput is admitted requests finished per second. In
	// a closed loop (clients that wait for each answer before the next)
	// the two are equal whatever the demand, which is why demand is read
	// from InFlight + Queued instead.
	ArrivalRate, Throughput float64
	// InFlight and Queued are time averages of admitted-and-unfinished and
	// waiting requests, from the state sampled every SampleInterval.
	InFlight, Queued float64
	// MeanQueue is the mean wait for admission of the requests that reached
	// it (rejected ones up to their rejection); MeanService the mean time
	// from admission to the upstream's last byte.
	MeanQueue, MeanService time.Duration
	// QueueP50 ... ServiceP99 are quantiles estimated from the classic
	// histogram buckets the way histogram_quantile does.
	QueueP50, QueueP99, ServiceP50, ServiceP99 time.Duration
	// UnloadedService is the shortest service time of a successful request
	// within UnloadedHorizon: the upstream's time when nothing else
	// competes. 0 when none was seen.
	//
	// It is a minimum, so it assumes requests that cost about the same; a
	// mix of cheap and expensive endpoints makes it the cheapest one's, and
	// the capacity below an underestimate.
	UnloadedService time.Duration
	// QueueShare is the part of requests' time spent waiting for admission
	// rather than being served, from 0 to 1.
	QueueShare float64
	// Capacity is the concurrency the upstream sustains, Throughput ×
	// UnloadedService (Little's law at the unloaded service time); 0 until
	// the window holds MinRequests.
	Capacity float64
	// Saturated is set when the upstream holds clearly more requests than
	// Capacity and its service time has grown well above UnloadedService:
	// it is queueing inside.
	Saturated bool
	// UpstreamMemoryBytes is the upstream's memory at the last scrape, 0
	// when it is not read.
	UpstreamMemoryBytes float64
	// BytesPerRequest is the slope of the upstream's memory against
	// in-flight requests, from the last fit that had enough variation in
	// load to make one; 0 until then.
	BytesPerRequest float64
}

// Thresholds of the saturation estimate. Noise in a minute of measurements
// moves in-flight and service time by some tens of percent; half again is
// beyond that, and well below the fourfold growth of an upstream holding
// four times what it serves.
const (
	// MinRequests is the least traffic in the window for a capacity
	// estimate or advice: with fewer requests one slow or fast request
	// moves the means by more than a percent.
	MinRequests = 100
	// SaturatedInFlight: the upstream holds more than this many times its
	// capacity...
	SaturatedInFlight = 1.5
	// SaturatedService: ...and its mean service time is more than this many
	// times its unloaded time.
	SaturatedService = 1.5
)

// estimate adds the capacity and the saturation verdict to f.
//
// An upstream that is not saturated serves each request in about its
// unloaded time, and by Little's law holds Throughput × UnloadedService
// requests: the capacity equals the concurrency it is given. A saturated
// one completes no faster however many it holds, so the same product is
// what it really sustains, while the requests it holds (InFlight) and its
// service time grow together beyond it. Both signs are required: either
// alone can come from a slow minute of a healthy upstream.
func estimate(f *Figures) {
	if f.Requests < MinRequests || f.UnloadedService <= 0 || f.Throughput <= 0 {
		return
	}
	f.Capacity = f.Throughput * f.UnloadedService.Seconds()
	f.Saturated = f.InFlight > SaturatedInFlight*f.Capacity &&
		float64(f.MeanService) > SaturatedService*float64(f.UnloadedService)
}
