package bench

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
)

func TestOpenPacerSchedule(t *testing.T) {
	p := pacer{rate: 3}
	for i, want := range []time.Duration{0, 333333333, 666666667, time.Second, 1333333333} {
		if got := p.offset(int64(i)); got != want {
			t.Errorf("3 rps: request %d due at %v; want %v", i, got, want)
		}
	}
	// Computed from i, not summed: no drift after a million requests.
	if got := (pacer{rate: 3000}).offset(3_000_000); got != 1000*time.Second {
		t.Errorf("3000 rps: request 3000000 due at %v; want 1000s exactly", got)
	}
	for _, tt := range []struct {
		rate     float64
		from, to time.Duration
		want     int64
	}{
		{3, 0, time.Second, 3},
		{3, time.Second, 2 * time.Second, 3},
		{3, 333333333, 333333334, 1},
		{3, 333333334, time.Second, 1},
		{1000, 250 * time.Millisecond, 1250 * time.Millisecond, 1000},
		{0.5, 0, 10 * time.Second, 5},
		{0.5, time.Second, 2 * time.Second, 0},
		{7, 0, 0, 0},
	} {
		if got := (pacer{rate: tt.rate}).between(tt.from, tt.to); got != tt.want {
			t.Errorf("%v rps: %d due in [%v, %v); want %d", tt.rate, got, tt.from, tt.to, tt.want)
		}
	}
}

// sleeper answers 200 after d, or a timeout at the deadline if that comes
// first, the way fasthttp's DoDeadline does.
func sleeper(d time.Duration) func(time.Time) answer {
	return func(deadline time.Time) answer {
		if until := time.Until(deadline); until < d {
			time.Sleep(max(until, 0))
			return answer{err: fasthttp.ErrTimeout, retryAfter: -1}
		}
		time.Sleep(d)
		return answer{status: 200, retryAfter: -1}
	}
}

func TestOpenKeepsToTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sends []time.Duration
		begin := time.Now()
		serve := sleeper(10 * time.Millisecond)
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 100, Warmup: 500 * time.Millisecond, Window: time.Second,
			send: func(deadline time.Time) answer {
				mu.Lock()
				sends = append(sends, time.Since(begin))
				mu.Unlock()
				return serve(deadline)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(sends)
		if len(sends) != 150 {
			t.Fatalf("%d requests sent in 1.5 s at 100 rps; want 150", len(sends))
		}
		for i, at := range sends {
			if want := time.Duration(i) * 10 * time.Millisecond; at != want {
				t.Fatalf("request %d sent at %v; want %v", i, at, want)
			}
		}
		if res.Due != 100 || res.Sent != 100 || res.SendRate != 100 || res.Throughput != 100 || res.Counts.OK != 100 || res.Counts.Total() != 100 {
			t.Errorf("due %d, sent %d at %v/s, %v 2xx/s, counts %+v; want 100 of each, all 2xx", res.Due, res.Sent, res.SendRate, res.Throughput, res.Counts)
		}
		if res.P50 != 10*time.Millisecond || res.P99 != 10*time.Millisecond || res.Max != 10*time.Millisecond {
			t.Errorf("latency p50 %v p99 %v max %v; want 10ms, the service time, throughout", res.P50, res.P99, res.Max)
		}
		if res.Late != 0 || res.SendLagMax != 0 || len(res.RigNotes()) != 0 {
			t.Errorf("late %d, lag max %v, notes %q; want a rig exactly on time", res.Late, res.SendLagMax, res.RigNotes())
		}
		// A request is answered at the instant the next is due; either
		// may come first.
		if res.PeakInFlight < 1 || res.PeakInFlight > 2 {
			t.Errorf("peak in flight %d; want 1 or 2 (10 ms answers, 10 ms apart)", res.PeakInFlight)
		}
	})
}

// A rig that stalls for 100 ms sends the requests due meanwhile late, in a
// burst, and their latency counts from when they were due.
func TestOpenLatencyFromIntendedTimeWhenTheRigStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 100, Warmup: 500 * time.Millisecond, Window: time.Second,
			send: sleeper(10 * time.Millisecond),
			pause: func(i int64) {
				if i == 100 { // due at 1 s, in the window
					time.Sleep(100 * time.Millisecond)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Requests 100..109 (due 1.00..1.09 s) go out at 1.10 s.
		if res.Max != 110*time.Millisecond || res.SendLagMax != 100*time.Millisecond {
			t.Errorf("max latency %v, max lag %v; want 110ms and 100ms: 100 ms late plus 10 ms of service", res.Max, res.SendLagMax)
		}
		if res.Late != 9 { // lags of 20..100 ms; 10 ms is on time
			t.Errorf("late sends %d; want 9", res.Late)
		}
		if res.Counts.OK != 100 || res.SendRate != 100 {
			t.Errorf("%d 2xx, sent %v/s; want all 100, caught up", res.Counts.OK, res.SendRate)
		}
		if notes := strings.Join(res.RigNotes(), "; "); !strings.Contains(notes, "9 of 100 sends (9%) went out more than 10 ms late, up to 100 ms") {
			t.Errorf("rig notes %q; want the late sends said", notes)
		}
	})
}

// An upstream that answers nothing for half a second delays every request
// due in that half second, not one: latency grows from their due times.
func TestOpenStalledUpstreamShowsInEveryRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The stall ends half a send before the next request is due: at
		// the same instant, whether that send or the stalled answers came
		// first was the scheduler's choice, and the peak read 100 or 101.
		stallEnd := time.Now().Add(time.Second - 5*time.Millisecond)
		serve := sleeper(10 * time.Millisecond)
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 100, Warmup: 500 * time.Millisecond, Window: time.Second,
			send: func(deadline time.Time) answer {
				if d := time.Until(stallEnd); d > 0 {
					time.Sleep(d)
					return answer{status: 200, retryAfter: -1}
				}
				return serve(deadline)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Due at 0.50..0.99 s, answered at 0.995 s: 495, 485, .. 5 ms;
		// the other 50 take 10 ms. The 90th of 100 is 395 ms.
		if res.Max != 495*time.Millisecond {
			t.Errorf("max %v; want 495ms, the request due when the window began", res.Max)
		}
		if res.P90 < 394*time.Millisecond || res.P90 > 396*time.Millisecond {
			t.Errorf("p90 %v; want 395ms within the histogram's 0.1%%", res.P90)
		}
		if res.PeakInFlight != 100 {
			t.Errorf("peak in flight %d; want the 100 due before the stall ended", res.PeakInFlight)
		}
		if res.Late != 0 {
			t.Errorf("late %d; want none: the rig sent on time, the upstream stalled", res.Late)
		}
	})
}

func TestOpenCapCountsNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 100, Window: time.Second, MaxInFlight: 5,
			send: sleeper(time.Second),
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Due != 100 || res.Sent != 5 || res.Counts.NotSent != 95 || res.Counts.OK != 5 || res.Counts.Total() != res.Due {
			t.Errorf("due %d, sent %d, counts %+v; want 5 sent and 2xx, 95 not sent", res.Due, res.Sent, res.Counts)
		}
		if res.PeakInFlight != 5 {
			t.Errorf("peak in flight %d; want the cap, 5", res.PeakInFlight)
		}
		if notes := strings.Join(res.RigNotes(), "; "); !strings.Contains(notes, "95 requests not sent: 5 already in flight, the cap") ||
			!strings.Contains(notes, "sent 5.0/s, 95% below the intended 100/s") {
			t.Errorf("rig notes %q; want the cap and the shortfall said", notes)
		}
	})
}

func TestOpenTimeoutsAndTheRunsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Timeout counts from the due time.
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 10, Window: time.Second, Timeout: 100 * time.Millisecond,
			send: sleeper(200 * time.Millisecond),
		})
		if err != nil || res.Counts.Timeouts != 10 || res.Counts.OK != 0 {
			t.Errorf("200 ms answers, 100 ms timeout: counts %+v, %v; want 10 timeouts", res.Counts, err)
		}

		// Whatever Timeout says, the run ends OpenTail after the window.
		begin := time.Now()
		res, err = RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 10, Warmup: time.Second, Window: time.Second, Timeout: time.Hour,
			send: sleeper(time.Hour),
		})
		if took := time.Since(begin); took != 2*time.Second+OpenTail {
			t.Errorf("run against an upstream that never answers took %v; want warm-up + window + %v", took, OpenTail)
		}
		if err != nil || res.Counts.Timeouts != 10 {
			t.Errorf("counts %+v, %v; want the 10 requests of the window cut as timeouts", res.Counts, err)
		}
	})
}

func TestOpenCountsStatusesAndRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		n := 0
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 10, Window: time.Second,
			send: func(time.Time) answer {
				mu.Lock()
				defer mu.Unlock()
				n++
				switch n {
				case 1, 2:
					return answer{status: 503, retryAfter: 1}
				case 3:
					return answer{status: 503, retryAfter: 4}
				case 4:
					return answer{status: 503, retryAfter: -1}
				case 5:
					return answer{status: 504, retryAfter: -1}
				case 6:
					return answer{status: 404, retryAfter: -1}
				case 7:
					return answer{err: fasthttp.ErrConnectionClosed, retryAfter: -1}
				}
				return answer{status: 204, retryAfter: -1}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := OpenCounts{OK: 3, Unavailable: 4, GatewayTime: 1, OtherStatus: 1, Errors: 1}
		if res.Counts != want {
			t.Errorf("counts %+v; want %+v", res.Counts, want)
		}
		if res.RetryAfter != (RetryAfter{N: 3, Min: 1, Median: 1, Max: 4}) || res.RetryAfter.String() != "1/1/4 s" {
			t.Errorf("Retry-After %+v; want 3 values, 1/1/4", res.RetryAfter)
		}
	})
}

func TestOpenConfigRefused(t *testing.T) {
	for _, cfg := range []OpenConfig{
		{URL: "http://127.0.0.1:1/", Rate: 0},
		{URL: "http://127.0.0.1:1/", Rate: -5},
		{URL: "http://127.0.0.1:1/", Rate: 2e6},
		{URL: "ftp://x/", Rate: 10},
		{URL: "http://127.0.0.1:1/", Rate: 10, MaxInFlight: -1},
	} {
		if _, err := RunOpen(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("RunOpen(%+v) = %v; want ErrConfig", cfg, err)
		}
	}
	if n := DefaultMaxInFlight(); n < 16 || n*DescriptorsPerRequest > openFileLimit() {
		t.Errorf("DefaultMaxInFlight() = %d with an open-file limit of %d; want %d descriptors each to fit", n, openFileLimit(), DescriptorsPerRequest)
	}
}

// Above 1000 rps the pacer wakes once a millisecond and sends what is due,
// each request late by less than a millisecond, counted in its latency.
func TestOpenPacerWakesOncePerQuantum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		wakes := map[time.Duration]int{}
		begin := time.Now()
		serve := sleeper(5 * time.Millisecond)
		res, err := RunOpen(context.Background(), OpenConfig{
			URL: "http://127.0.0.1:1/", Rate: 4000, Window: time.Second,
			send: func(deadline time.Time) answer {
				mu.Lock()
				wakes[time.Since(begin)]++
				mu.Unlock()
				return serve(deadline)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		for at, n := range wakes {
			if at%pacerQuantum != 0 || n > 4 {
				t.Errorf("%d requests sent at %v; want at most 4 at a time, on whole milliseconds", n, at)
			}
		}
		if len(wakes) < 990 || len(wakes) > 1001 {
			t.Errorf("sends at %d distinct times in 1 s; want about 1000", len(wakes))
		}
		if res.Due != 4000 || res.Counts.OK != 4000 || res.SendRate < 3990 {
			t.Errorf("due %d, counts %+v, sent %v/s; want 4000 on schedule", res.Due, res.Counts, res.SendRate)
		}
		if res.SendLagMax >= pacerQuantum || res.Late != 0 || res.Max >= 5*time.Millisecond+pacerQuantum {
			t.Errorf("lag max %v, late %d, latency max %v; want under a quantum late", res.SendLagMax, res.Late, res.Max)
		}
	})
}
