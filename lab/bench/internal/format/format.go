// Package format writes the rig's figures the way its tables and
// sentences print them, for the load engine and the report writers alike.
package format

import (
	"fmt"
	"strconv"
	"time"
)

// Dur writes a latency the way people read them: 0.42 ms, 4.51 ms,
// 203 ms, 2.03 s.
func Dur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 0.005: // would print as 0.00
		return "0 ms"
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 10000:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.1f s", ms/1000)
}

// Rate writes a rate without a fraction when it has none: 1200, 0.5.
func Rate(r float64) string {
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// Pct writes a signed fraction as "12% above" or "12% below".
func Pct(off float64) string {
	if off >= 0 {
		return fmt.Sprintf("%.0f%% above", 100*off)
	}
	return fmt.Sprintf("%.0f%% below", -100*off)
}

// Bytes writes memory in MiB, the unit the experiments read it in, and
// nothing for 0, which is unknown.
func Bytes(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
