package sidecar

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/loomgate/loomgate/limiter"
)

// EnvPrefix is prepended to the env tag of each Config field to name its
// variable.
const EnvPrefix = "LOOMGATE_"

// Variable describes one variable of Config, for help text, error messages
// and checks of deploy files.
type Variable struct {
	// Name is the full name, with EnvPrefix.
	Name    string
	Default string
	Help    string
	Accepts string
	// Mode is the admission modes the variable belongs to, separated by
	// commas (fixed,adaptive), empty when it applies to all.
	Mode string
	// Field is the Config field it fills.
	Field string
}

// Variables lists every variable of Config, in declaration order.
func Variables() []Variable {
	t := reflect.TypeFor[Config]()
	vars := make([]Variable, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		vars = append(vars, Variable{
			Name:    EnvPrefix + f.Tag.Get("env"),
			Default: f.Tag.Get("envDefault"),
			Help:    f.Tag.Get("help"),
			Accepts: f.Tag.Get("accepts"),
			Mode:    f.Tag.Get("mode"),
			Field:   f.Name,
		})
	}
	return vars
}

// Value renders v's value in c the way the variable is written.
func (c Config) Value(v Variable) string {
	x := reflect.ValueOf(c).FieldByName(v.Field).Interface()
	if m, ok := x.(interface{ MarshalText() ([]byte, error) }); ok {
		if b, err := m.MarshalText(); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(x)
}

// ActiveIn reports whether the variable is in force in mode.
func (v Variable) ActiveIn(mode limiter.Mode) bool {
	return v.Mode == "" || slices.Contains(strings.Split(v.Mode, ","), mode.String())
}
