package bench

import "testing"

func TestStatField(t *testing.T) {
	stat := []byte("4242 (loom gate) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 100 2000000 3000")
	if got := statField(stat, 3); got != "S" {
		t.Errorf("state = %q; want S", got)
	}
	if u, s := statField(stat, 14), statField(stat, 15); u != "250" || s != "75" {
		t.Errorf("utime, stime = %s, %s; want 250, 75", u, s)
	}
}
