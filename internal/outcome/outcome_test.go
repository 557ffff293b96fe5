package outcome

import "testing"

func TestAnswered(t *testing.T) {
	for _, tt := range []struct {
		kind   Kind
		status int
		want   bool
	}{
		{OK, 200, true},
		{OK, 404, true},
		{OK, 499, true},
		{OK, 500, false},
		{OK, 503, false},
		{OK, 0, false},
		{ClientClosed, 200, false},  // the response was not all written
		{UpstreamTimeout, 0, false}, // no answer
		{UpstreamError, 200, false}, // the body failed after a 200's header
	} {
		r := Record{Kind: tt.kind, UpstreamStatus: tt.status}
		if got := r.Answered(); got != tt.want {
			t.Errorf("Record{Kind: %v, UpstreamStatus: %d}.Answered() = %v; want %v", tt.kind, tt.status, got, tt.want)
		}
	}
}

func TestKindStrings(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		s := k.String()
		if s == "unknown" || seen[s] {
			t.Errorf("Kind(%d).String() = %q; want a name of its own", k, s)
		}
		seen[s] = true
	}
	if got := Kind(NumKinds).String(); got != "unknown" {
		t.Errorf("Kind(NumKinds).String() = %q; want \"unknown\"", got)
	}
	if len(seen) != NumKinds {
		t.Errorf("Kinds() has %d names; want %d", len(seen), NumKinds)
	}
}
