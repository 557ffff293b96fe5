package field

import (
	"errors"
	"fmt"
	"testing"
)

func TestAllFindsEveryProblemHoweverJoined(t *testing.T) {
	workers := &Error{Part: "limiter", Field: "Workers", Problem: "is 0; want at least 1"}
	upstream := &Error{Part: "proxy", Field: "Upstream", Problem: "has no host"}
	plain := errors.New("registerer refused the collector")
	err := errors.Join(
		errors.Join(workers, fmt.Errorf("starting: %w", upstream)),
		plain,
	)
	got := All(err)
	if len(got) != 3 {
		t.Fatalf("All found %d problems; want 3: %v", len(got), got)
	}
	if got[0] != workers || got[1] != upstream {
		t.Errorf("All = %v; want the limiter's and the proxy's *Error first, in order", got)
	}
	if got[2].Field != "" || got[2].Problem != "registerer refused the collector" {
		t.Errorf("an error with no field came back as %+v; want its text as the problem, no field", got[2])
	}
	if All(nil) != nil {
		t.Error("All(nil) is not nil")
	}
}

func TestErrorNamesThePartOnlyWhenThereIsOne(t *testing.T) {
	if got, want := (&Error{Part: "limiter", Field: "Workers", Problem: "is 0; want at least 1"}).Error(), "limiter: Workers is 0; want at least 1"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if got, want := (&Error{Field: "Workers", Problem: "is 0; want at least 1"}).Error(), "Workers is 0; want at least 1"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
}
