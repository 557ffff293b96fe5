//go:build !linux

package overhead

import "errors"

// The scenario runs on Linux only (Run says so); these keep the package
// building elsewhere.

var errNotLinux = errors.New("needs Linux")

func allowedCPUs() ([]int, error)                { return nil, errNotLinux }
func pinSelf(int) (func(), error)                { return nil, errNotLinux }
func startOn(int, func() error) error            { return errNotLinux }
func processCPU(int) (int64, error)              { return 0, errNotLinux }
func newQuotaGroup(float64) (*quotaGroup, error) { return nil, errNotLinux }

type quotaGroup struct{ dir, procs string }

func (g *quotaGroup) remove() error { return errNotLinux }
