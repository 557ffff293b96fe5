package admission

import (
	"testing"
	"time"
)

// TestAppendMillis: Server-Timing's durations in milliseconds, three
// decimals, half a microsecond rounding up.
func TestAppendMillis(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.000"},
		{499, "0.000"},
		{500, "0.001"},
		{1499, "0.001"},
		{999_499, "0.999"},
		{999_500, "1.000"},
		{1_234_567, "1.235"},
		{12 * time.Millisecond, "12.000"},
		{30*time.Second + 40*time.Microsecond, "30000.040"},
		{2 * time.Hour, "7200000.000"},
		{-1500 * time.Microsecond, "-1.500"},
	} {
		if got := string(appendMillis(nil, tt.d)); got != tt.want {
			t.Errorf("appendMillis(%v) = %s; want %s", tt.d, got, tt.want)
		}
	}
}
