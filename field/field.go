// Package field is the one error type for a problem with one field of a
// configuration, shared by every part (limiter, proxy, metrics, advice,
// sidecar) so that whoever assembles them reads any part's problem with
// one errors.As and names the field the way its user wrote it, without
// matching on error text.
package field

import "errors"

// Error is a problem with one field of a part's configuration.
type Error struct {
	// Part is the package whose configuration it is, e.g. "limiter"; ""
	// when the field is the user's own setting (the sidecar's Config).
	Part string
	// Field is the Go field's name, e.g. "Workers".
	Field string
	// Problem says what is wrong and what is accepted, e.g. "is 0; want
	// at least 1".
	Problem string
}

func (e *Error) Error() string {
	if e.Part == "" {
		return e.Field + " " + e.Problem
	}
	return e.Part + ": " + e.Field + " " + e.Problem
}

// All lists the *Error values in err, however deeply joined or wrapped;
// an error that carries none is returned as an *Error with no field, so
// that nothing is lost.
func All(err error) []*Error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var all []*Error
		for _, e := range j.Unwrap() {
			all = append(all, All(e)...)
		}
		return all
	}
	var fe *Error
	if errors.As(err, &fe) {
		return []*Error{fe}
	}
	return []*Error{{Problem: err.Error()}}
}
