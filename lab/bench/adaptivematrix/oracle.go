package adaptivematrix

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PoolOracle is the oracle of a case whose truth moves: it reads the
// stub's pool size from the stub's /metrics every 100 ms and sets the
// limit to it, so that it knows each change within a tenth of a second.
type PoolOracle struct {
	// SetLimit applies a limit. Required.
	SetLimit func(int)
	// UpstreamURL is the stub's base URL. Required.
	UpstreamURL string
}

// Record ignores the samples: the oracle knows.
func (PoolOracle) Record(time.Duration) {}

// Run follows the pool until ctx ends.
func (o PoolOracle) Run(ctx context.Context) {
	client := &http.Client{Timeout: time.Second}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := -1
	for {
		if size := o.poolSize(client); size > 0 && size != last {
			o.SetLimit(size)
			last = size
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (o PoolOracle) poolSize(client *http.Client) int {
	resp, err := client.Get(strings.TrimSuffix(o.UpstreamURL, "/") + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "loomgate_stub_pool_size "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}
