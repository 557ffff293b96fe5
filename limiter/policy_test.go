package limiter

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestDryRunAdmitsEveryRequestAndCountsTheMode: a dry run of a fixed pool
// of one with no queue admits three requests at once, for real, and
// reports that its mode would have admitted the first and rejected the
// others; each request's shadow permit is held for as long as it was
// really served.
func TestDryRunAdmitsEveryRequestAndCountsTheMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got tally
		dry := NewDryRun(mustNew(t, Config{Mode: Fixed, Workers: 1}), got.add)
		defer dry.Close()
		reqs := make([]Request, 3)
		for i := range reqs {
			reqs[i].Bytes = 10
			if err := dry.Admit(time.Now(), &reqs[i]); err != nil {
				t.Fatalf("Admit %d = %v; want every request admitted", i, err)
			}
		}
		if got.admitted != 1 || got.full != 2 {
			t.Errorf("reported %d admitted, %d rejected; want 1 and 2, as the mode would", got.admitted, got.full)
		}
		if st := dry.Stats(); st.InFlight != 3 || st.Bytes != 30 || st.Limit != 0 {
			t.Errorf("Stats = %+v; want the 3 admitted for real, 30 bytes, no limit", st)
		}
		if n := dry.Shadow().Limiter().Stats().InFlight; n != 1 {
			t.Errorf("the shadow holds %d; want the 1 its mode admitted", n)
		}
		time.Sleep(time.Second)
		for i := range reqs {
			reqs[i].Service = time.Second
			dry.Leave(time.Now(), &reqs[i], reqs[i].Bytes)
		}
		if st := dry.Stats(); st.InFlight != 0 || st.Bytes != 0 {
			t.Errorf("after Leave, Stats = %+v; want nothing held", st)
		}
		// Admitted in the shadow a second ago and served for a second: its
		// shadow permit is due back now.
		synctest.Wait()
		if n := dry.Shadow().Limiter().Stats().InFlight; n != 0 {
			t.Errorf("the shadow holds %d after the service time; want 0", n)
		}
	})
}
