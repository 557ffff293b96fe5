package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/loomgate/loomgate/field"
	"github.com/loomgate/loomgate/internal/cli"
	"github.com/loomgate/loomgate/limiter"
)

// EnvError holds every problem found in the environment, each naming the
// variable, the value given and what is accepted, so that an operator
// fixes them in one round instead of one per restart.
type EnvError struct {
	// Problems are lines such as
	// LOOMGATE_WORKERS="0": want at least 1; accepted: a whole number …
	Problems []string
}

func (e *EnvError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// ParseEnv reads the Config from environ (os.Environ's form) and validates
// it: the one reading of the LOOMGATE_* variables. Every problem is
// reported in an *EnvError, in the order of `loomgate -h`.
func ParseEnv(environ []string) (Config, error) {
	envMap := env.ToMap(environ)
	vars := Variables()
	byField := make(map[string]Variable, len(vars))
	known := make(map[string]bool, len(vars))
	names := make([]string, 0, len(vars))
	for _, v := range vars {
		byField[v.Field] = v
		known[v.Name] = true
		names = append(names, v.Name)
	}
	kinds := fieldKinds()

	var cfg Config
	var problems []string
	// A field that failed to parse keeps its zero value; judging it again
	// would report a second, misleading problem for the same variable.
	failed := make(map[string]bool)
	bad := func(v Variable, detail string) {
		if failed[v.Name] {
			return
		}
		failed[v.Name] = true
		if value, set := envMap[v.Name]; set {
			problems = append(problems, fmt.Sprintf("%s=%q: %s; accepted: %s", v.Name, value, detail, v.Accepts))
			return
		}
		// A default at fault beside another variable's value: say which
		// value it is, or the operator looks for a setting that is not
		// there.
		problems = append(problems, fmt.Sprintf("%s (unset, default %s): %s; accepted: %s", v.Name, v.Default, detail, v.Accepts))
	}

	// Set but empty is not unset: env would quietly take the default, and
	// an operator who cleared LOOMGATE_UPSTREAM in a template would run
	// against 127.0.0.1:8081 without knowing.
	for _, v := range vars {
		if value, set := envMap[v.Name]; set && value == "" && v.Default != "" {
			bad(v, fmt.Sprintf("empty; unset it for the default %s", v.Default))
		}
	}

	// The prefix alone names no variable (it is reported below as
	// unknown), but env would read it for the untagged fields of the
	// types a variable parses into, whose errors name no variable.
	parsed := envMap
	if _, ok := envMap[EnvPrefix]; ok {
		parsed = maps.Clone(envMap)
		delete(parsed, EnvPrefix)
	}
	err := env.ParseWithOptions(&cfg, env.Options{Prefix: EnvPrefix, Environment: parsed})
	var agg env.AggregateError
	if errors.As(err, &agg) {
		for _, e := range agg.Errors {
			var pe env.ParseError
			if errors.As(e, &pe) {
				bad(byField[pe.Name], parseDetail(pe.Err, kinds[pe.Name]))
				continue
			}
			problems = append(problems, e.Error())
		}
	} else if err != nil {
		return cfg, err
	}

	// A field that failed to parse is judged no further (bad keeps to one
	// line a variable).
	var ce *ConfigError
	if err := cfg.Validate(); errors.As(err, &ce) {
		for _, p := range ce.Problems {
			v, ok := byField[p.Field]
			if !ok {
				problems = append(problems, p.Error())
				continue
			}
			bad(v, problemText(p.Problem, vars))
		}
	} else if err != nil {
		return cfg, err
	}

	// With fifo, QUEUE_TARGET is not in force, and its default need not
	// be below a short QUEUE_TIMEOUT; one written by someone is checked as
	// codel would check it, so that a flip of QUEUE_POLICY cannot fail.
	if cfg.QueuePolicy == limiter.FIFO {
		asCodel := cfg.Limiter()
		asCodel.Mode, asCodel.QueuePolicy = limiter.Fixed, limiter.CoDel
		for _, p := range field.All(asCodel.Validate()) {
			if _, set := envMap[EnvPrefix+"QUEUE_TARGET"]; set && p.Field == "QueueTarget" {
				bad(byField[p.Field], problemText(p.Problem, vars))
			}
		}
	}

	var unknown []string
	for name := range envMap {
		// In any case: loomgate_workers is read by nobody (variables'
		// names are case-sensitive), and was quietly ignored.
		if len(name) >= len(EnvPrefix) && strings.EqualFold(name[:len(EnvPrefix)], EnvPrefix) && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		hint := ""
		if best := cli.Closest(strings.ToUpper(name), names); best != "" {
			hint = " (did you mean " + best + "?)"
		}
		problems = append(problems, fmt.Sprintf("%s=%q: unknown variable%s; `loomgate -h` lists them all", name, envMap[name], hint))
	}

	if len(problems) > 0 {
		// Report in the order of `loomgate -h`, whichever check found what.
		order := make(map[string]int, len(vars))
		for i, v := range vars {
			order[v.Name] = i
		}
		rank := func(p string) int {
			name, _, _ := strings.Cut(p, "=")
			name, _, _ = strings.Cut(name, " ")
			if i, ok := order[name]; ok {
				return i
			}
			return len(vars)
		}
		sort.SliceStable(problems, func(i, j int) bool { return rank(problems[i]) < rank(problems[j]) })
		return cfg, &EnvError{Problems: problems}
	}
	return cfg, nil
}

// unprefixed names, in the order of `loomgate -h`, the variables of
// environ that are loomgate's without the prefix (MODE, WORKERS …) while
// the prefixed one is unset: loomgate reads only LOOMGATE_ ones, and
// `MODE=fixed WORKERS=5 loomgate` started pass-through without a word.
// Some of these names (LISTEN, MODE, LOG_LEVEL) may be another program's
// in a shared environment (a ConfigMap in envFrom); each is still named:
// the cost of a false alarm is one line of the log, that of silence a
// mode that is not the one meant.
func unprefixed(environ []string) []string {
	envMap := env.ToMap(environ)
	var names []string
	for _, v := range Variables() {
		short := strings.TrimPrefix(v.Name, EnvPrefix)
		if _, set := envMap[short]; !set {
			continue
		}
		if _, set := envMap[v.Name]; !set {
			names = append(names, short)
		}
	}
	return names
}

// warnUnprefixed logs, in one line, the variables unprefixed finds in
// environ, each with the name loomgate reads.
func warnUnprefixed(log *slog.Logger, environ []string) {
	names := unprefixed(environ)
	if len(names) == 0 {
		return
	}
	prefixed := make([]string, len(names))
	for i, n := range names {
		prefixed[i] = EnvPrefix + n
	}
	log.Warn("ignored: loomgate reads only LOOMGATE_ variables; if these are meant for it, set the prefixed names",
		"unprefixed", strings.Join(names, ","), "set_instead", strings.Join(prefixed, ","))
}

// LogConfig writes the configuration in force, defaults included and
// auto resolved, so that an operator reading the log knows what runs
// without reading the deployment; the other modes' settings follow on a
// line of their own, marked inactive, so that what a flip of LOOMGATE_MODE
// would bring is in the log too.
func (s *Sidecar) LogConfig(log *slog.Logger) {
	cfg := s.cfg
	var active, inactive []any
	for _, v := range Variables() {
		if !v.ActiveIn(cfg.Mode) {
			inactive = append(inactive, v.Name, cfg.Value(v))
			continue
		}
		active = append(active, v.Name, cfg.Value(v))
	}
	log.Info("configuration", active...)
	log.Info("inactive in LOOMGATE_MODE="+cfg.Mode.String()+"; in force after a flip of the mode", inactive...)
}

// problemText turns a part's problem ("is 0; want at least 1", "is 1s;
// has no effect without a Bulkhead above 0") into the words of the
// variable's line, where the value is already shown and other fields go by
// their variables' names.
func problemText(p string, vars []Variable) string {
	if rest, ok := strings.CutPrefix(p, "is "); ok {
		if value, want, ok := strings.Cut(rest, "; "); ok && !strings.Contains(value, " ") {
			p = want
		}
	}
	words := strings.Fields(p)
	for i, w := range words {
		// A field's name may stand in punctuation: "(Listen)", "Listen;".
		core := strings.Trim(w, "(),;:.")
		for _, v := range vars {
			if core == v.Field {
				words[i] = strings.Replace(w, core, v.Name, 1)
			}
		}
	}
	return strings.Join(words, " ")
}

// fieldKinds maps each Config field to the kind of its value, so that a
// parse error can say what was expected.
func fieldKinds() map[string]reflect.Kind {
	t := reflect.TypeFor[Config]()
	kinds := make(map[string]reflect.Kind, t.NumField())
	for i := range t.NumField() {
		kinds[t.Field(i).Name] = t.Field(i).Type.Kind()
	}
	return kinds
}

// parseDetail turns a parser's error into words about the value, without
// the Go package prefixes (strconv.ParseInt: ..., time: ...) that mean
// nothing to an operator.
func parseDetail(err error, kind reflect.Kind) string {
	var ne *strconv.NumError
	switch {
	case kind == reflect.Bool:
		return "not true or false"
	case errors.As(err, &ne):
		return "not a whole number"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "missing unit in duration"):
		return "a duration needs a unit"
	case strings.Contains(msg, "time: "):
		return "not a duration"
	case strings.HasPrefix(msg, "slog: "):
		return "unknown level"
	}
	return strings.TrimPrefix(msg, "unable to parse: ")
}
