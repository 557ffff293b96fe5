package bench

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrFormat is returned, wrapped with the line or field at fault, by
// ReadCSV and ReadJSON for input they cannot read back.
var ErrFormat = errors.New("bench: malformed results")

// WriteMarkdown writes results as a markdown table, one row per level, with
// the reasons of flagged rows as numbered notes under it. The sidecar's
// columns, and each memory column, appear only when some row has them.
func WriteMarkdown(w io.Writer, results []Result) error {
	var scenarios = map[string]bool{}
	for _, r := range results {
		scenarios[r.Scenario] = true
	}
	multi := len(scenarios) > 1
	timed, memory, upstream := knownColumns(results)

	var head []string
	if multi {
		head = append(head, "scenario")
	}
	head = append(head, "arm", "c", "rps", "mean", "p50", "p95", "p99", "max", "errors")
	if timed {
		head = append(head, "queue", "service", "peak in flight", "peak queued", "limit")
	}
	if memory {
		head = append(head, "sidecar memory")
	}
	if upstream {
		head = append(head, "upstream memory")
	}
	head = append(head, "physics")

	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("| ")
		b.WriteString(strings.Join(cells, " | "))
		b.WriteString(" |\n")
	}
	row(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
		if i >= 1 {
			sep[i] = "--:"
		}
	}
	if multi {
		sep[1] = "---"
	}
	row(sep)

	var notes []string
	for _, r := range results {
		var cells []string
		if multi {
			cells = append(cells, r.Scenario)
		}
		cells = append(cells, r.Arm, strconv.Itoa(r.Concurrency), fmt.Sprintf("%.0f", r.RPS),
			fmtDur(r.Mean), fmtDur(r.P50), fmtDur(r.P95), fmtDur(r.P99), fmtDur(r.Max), fmtErrors(r.Errors))
		sc := r.Sidecar
		if timed {
			if sc != nil && sc.Loomgate {
				limit := "none"
				if sc.Limit > 0 {
					limit = strconv.Itoa(sc.Limit)
				}
				cells = append(cells, fmtDur(sc.QueueWait), fmtDur(sc.Service),
					strconv.Itoa(sc.PeakInFlight), strconv.Itoa(sc.PeakQueued), limit)
			} else {
				cells = append(cells, "", "", "", "", "")
			}
		}
		if memory {
			cells = append(cells, fmtBytes(r.sidecarMemory()))
		}
		if upstream {
			cells = append(cells, fmtBytes(r.UpstreamMemoryBytes))
		}
		verdict := "ok"
		if r.Physics.Flagged {
			notes = append(notes, fmt.Sprintf("%s c%d: %s", r.Arm, r.Concurrency, r.Physics.Reason))
			verdict = fmt.Sprintf("off [%d]", len(notes))
		}
		cells = append(cells, verdict)
		row(cells)
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, "\nRows more than %.0f%% off the physics check:\n", 100*Tolerance)
		for i, n := range notes {
			fmt.Fprintf(&b, "%d. %s\n", i+1, n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtErrors(e Errors) string {
	if e.Total() == 0 {
		return "0"
	}
	var parts []string
	for _, p := range []struct {
		n    int64
		kind string
	}{{e.Status, "status"}, {e.Timeout, "timeout"}, {e.Connect, "connect"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.kind))
		}
	}
	return fmt.Sprintf("%d (%s)", e.Total(), strings.Join(parts, ", "))
}

// fmtBytes writes memory in MiB, the unit the experiments read it in, and
// nothing for 0, which is unknown.
func fmtBytes(n int64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// sidecarMemory is the sidecar's peak resident memory, 0 when unknown.
func (r Result) sidecarMemory() int64 {
	if r.Sidecar == nil {
		return 0
	}
	return r.Sidecar.MemoryBytes
}

// upstreamMemory is the upstream's peak resident memory, 0 when unknown.
func (r Result) upstreamMemory() int64 { return r.UpstreamMemoryBytes }

// knownColumns says which optional columns some row of results fills: the
// sidecar's queue and service figures, its memory, the upstream's memory.
func knownColumns(results []Result) (timed, memory, upstream bool) {
	for _, r := range results {
		if sc := r.Sidecar; sc != nil {
			timed = timed || sc.Loomgate
			memory = memory || sc.MemoryBytes > 0
		}
		upstream = upstream || r.UpstreamMemoryBytes > 0
	}
	return timed, memory, upstream
}

// record is the flat, unit-suffixed form of a Result shared by CSV and
// JSON. Durations are milliseconds, written with as many digits as it
// takes to read the exact value back.
type record struct {
	Scenario      string  `json:"scenario"`
	Arm           string  `json:"arm"`
	URL           string  `json:"url"`
	Concurrency   int     `json:"concurrency"`
	WindowS       float64 `json:"window_s"`
	Requests      int64   `json:"requests"`
	RPS           float64 `json:"rps"`
	MeanMS        float64 `json:"mean_ms"`
	P50MS         float64 `json:"p50_ms"`
	P95MS         float64 `json:"p95_ms"`
	P99MS         float64 `json:"p99_ms"`
	MaxMS         float64 `json:"max_ms"`
	ErrorsStatus  int64   `json:"errors_status"`
	ErrorsTimeout int64   `json:"errors_timeout"`
	ErrorsConnect int64   `json:"errors_connect"`

	Sidecar *sidecarRecord `json:"sidecar"`

	UpstreamMemoryBytes int64 `json:"upstream_memory_bytes"`

	ExpectedRPS float64 `json:"expected_rps"`
	Off         float64 `json:"physics_off"`
	CeilingRPS  float64 `json:"ceiling_rps"`
	Limit       int     `json:"physics_limit"`
	ServiceMS   float64 `json:"physics_service_ms"`
	Flagged     bool    `json:"physics_flagged"`
	Reason      string  `json:"physics_reason"`
}

type sidecarRecord struct {
	Loomgate     bool    `json:"loomgate"`
	QueueMS      float64 `json:"queue_ms"`
	ServiceMS    float64 `json:"service_ms"`
	PeakInFlight int     `json:"peak_in_flight"`
	PeakQueued   int     `json:"peak_queued"`
	Limit        int     `json:"limit"`
	MemoryBytes  int64   `json:"memory_bytes"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fromMS inverts ms exactly for any duration below about three years: both
// conversions round to the nearest float and back to the nearest
// nanosecond.
func fromMS(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

func toRecord(r Result) record {
	rec := record{
		Scenario: r.Scenario, Arm: r.Arm, URL: r.URL, Concurrency: r.Concurrency,
		WindowS: r.Window.Seconds(), Requests: r.Requests, RPS: r.RPS,
		MeanMS: ms(r.Mean), P50MS: ms(r.P50), P95MS: ms(r.P95), P99MS: ms(r.P99), MaxMS: ms(r.Max),
		ErrorsStatus: r.Errors.Status, ErrorsTimeout: r.Errors.Timeout, ErrorsConnect: r.Errors.Connect,
		UpstreamMemoryBytes: r.UpstreamMemoryBytes,
		ExpectedRPS:         r.Physics.Expected, Off: r.Physics.Off, CeilingRPS: r.Physics.Ceiling,
		Limit: r.Physics.Limit, ServiceMS: ms(r.Physics.Service),
		Flagged: r.Physics.Flagged, Reason: r.Physics.Reason,
	}
	if sc := r.Sidecar; sc != nil {
		rec.Sidecar = &sidecarRecord{
			Loomgate: sc.Loomgate, QueueMS: ms(sc.QueueWait), ServiceMS: ms(sc.Service),
			PeakInFlight: sc.PeakInFlight, PeakQueued: sc.PeakQueued, Limit: sc.Limit, MemoryBytes: sc.MemoryBytes,
		}
	}
	return rec
}

func (rec record) result() Result {
	r := Result{
		Scenario: rec.Scenario, Arm: rec.Arm, URL: rec.URL, Concurrency: rec.Concurrency,
		Window:   time.Duration(math.Round(rec.WindowS * float64(time.Second))),
		Requests: rec.Requests, RPS: rec.RPS,
		Mean: fromMS(rec.MeanMS), P50: fromMS(rec.P50MS), P95: fromMS(rec.P95MS), P99: fromMS(rec.P99MS), Max: fromMS(rec.MaxMS),
		Errors:              Errors{Status: rec.ErrorsStatus, Timeout: rec.ErrorsTimeout, Connect: rec.ErrorsConnect},
		UpstreamMemoryBytes: rec.UpstreamMemoryBytes,
		Physics: Verdict{
			Expected: rec.ExpectedRPS, Off: rec.Off, Ceiling: rec.CeilingRPS,
			Limit: rec.Limit, Service: fromMS(rec.ServiceMS),
			Flagged: rec.Flagged, Reason: rec.Reason,
		},
	}
	if sc := rec.Sidecar; sc != nil {
		r.Sidecar = &SidecarStats{
			Loomgate: sc.Loomgate, QueueWait: fromMS(sc.QueueMS), Service: fromMS(sc.ServiceMS),
			PeakInFlight: sc.PeakInFlight, PeakQueued: sc.PeakQueued, Limit: sc.Limit, MemoryBytes: sc.MemoryBytes,
		}
	}
	return r
}

// WriteJSON writes results as an indented JSON array, one object per level,
// durations in milliseconds (fields ending _ms), "sidecar" null when there
// was no sidecar, "upstream_memory_bytes" 0 when the upstream's memory was
// not known.
func WriteJSON(w io.Writer, results []Result) error {
	recs := make([]record, len(results))
	for i, r := range results {
		recs[i] = toRecord(r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
}

// ReadJSON reads what WriteJSON wrote.
func ReadJSON(r io.Reader) ([]Result, error) {
	var recs []record
	if err := json.NewDecoder(r).Decode(&recs); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	results := make([]Result, len(recs))
	for i, rec := range recs {
		results[i] = rec.result()
	}
	return results, nil
}

// csvColumns is the header of results.csv. Columns are only ever added at
// the end, so scripts that read by position keep working.
var csvColumns = []string{
	"scenario", "arm", "url", "concurrency", "window_s", "requests", "rps",
	"mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms",
	"errors_status", "errors_timeout", "errors_connect",
	"sidecar_loomgate", "queue_ms", "service_ms", "peak_in_flight", "peak_queued", "limit", "memory_bytes",
	"expected_rps", "physics_off", "ceiling_rps", "physics_limit", "physics_service_ms", "physics_flagged", "physics_reason",
	"upstream_memory_bytes",
}

// csvAdded are the columns added to csvColumns since results.csv was first
// written: files from before lack them, and read as if they were empty.
var csvAdded = map[string]bool{"upstream_memory_bytes": true}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// WriteCSV writes results with a header line; the sidecar's columns are
// empty for rows without one, and upstream_memory_bytes when it is not
// known.
func WriteCSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvColumns); err != nil {
		return err
	}
	for _, r := range results {
		rec := toRecord(r)
		line := []string{
			rec.Scenario, rec.Arm, rec.URL, strconv.Itoa(rec.Concurrency), fmtFloat(rec.WindowS),
			strconv.FormatInt(rec.Requests, 10), fmtFloat(rec.RPS),
			fmtFloat(rec.MeanMS), fmtFloat(rec.P50MS), fmtFloat(rec.P95MS), fmtFloat(rec.P99MS), fmtFloat(rec.MaxMS),
			strconv.FormatInt(rec.ErrorsStatus, 10), strconv.FormatInt(rec.ErrorsTimeout, 10), strconv.FormatInt(rec.ErrorsConnect, 10),
		}
		if sc := rec.Sidecar; sc != nil {
			line = append(line, strconv.FormatBool(sc.Loomgate), fmtFloat(sc.QueueMS), fmtFloat(sc.ServiceMS),
				strconv.Itoa(sc.PeakInFlight), strconv.Itoa(sc.PeakQueued), strconv.Itoa(sc.Limit), strconv.FormatInt(sc.MemoryBytes, 10))
		} else {
			line = append(line, "", "", "", "", "", "", "")
		}
		line = append(line, fmtFloat(rec.ExpectedRPS), fmtFloat(rec.Off), fmtFloat(rec.CeilingRPS),
			strconv.Itoa(rec.Limit), fmtFloat(rec.ServiceMS), strconv.FormatBool(rec.Flagged), rec.Reason)
		if rec.UpstreamMemoryBytes > 0 {
			line = append(line, strconv.FormatInt(rec.UpstreamMemoryBytes, 10))
		} else {
			line = append(line, "")
		}
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote. Columns are found by their header, so
// a file with columns added later still reads.
func ReadCSV(r io.Reader) ([]Result, error) {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	index := map[string]int{}
	for i, name := range header {
		index[name] = i
	}
	for _, name := range csvColumns {
		if _, ok := index[name]; !ok && !csvAdded[name] {
			return nil, fmt.Errorf("%w: header has no %s column", ErrFormat, name)
		}
	}
	var results []Result
	for line := 2; ; line++ {
		cells, err := cr.Read()
		if err == io.EOF {
			return results, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		p := cellParser{cells: cells, index: index}
		rec := record{
			Scenario: p.str("scenario"), Arm: p.str("arm"), URL: p.str("url"),
			Concurrency: p.int("concurrency"), WindowS: p.float("window_s"),
			Requests: p.int64("requests"), RPS: p.float("rps"),
			MeanMS: p.float("mean_ms"), P50MS: p.float("p50_ms"), P95MS: p.float("p95_ms"), P99MS: p.float("p99_ms"), MaxMS: p.float("max_ms"),
			ErrorsStatus: p.int64("errors_status"), ErrorsTimeout: p.int64("errors_timeout"), ErrorsConnect: p.int64("errors_connect"),
			ExpectedRPS: p.float("expected_rps"), Off: p.float("physics_off"), CeilingRPS: p.float("ceiling_rps"),
			Limit: p.int("physics_limit"), ServiceMS: p.float("physics_service_ms"),
			Flagged: p.bool("physics_flagged"), Reason: p.str("physics_reason"),
		}
		if p.str("upstream_memory_bytes") != "" {
			rec.UpstreamMemoryBytes = p.int64("upstream_memory_bytes")
		}
		if p.str("sidecar_loomgate") != "" {
			rec.Sidecar = &sidecarRecord{
				Loomgate: p.bool("sidecar_loomgate"), QueueMS: p.float("queue_ms"), ServiceMS: p.float("service_ms"),
				PeakInFlight: p.int("peak_in_flight"), PeakQueued: p.int("peak_queued"), Limit: p.int("limit"),
				MemoryBytes: p.int64("memory_bytes"),
			}
		}
		if p.err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrFormat, line, p.err)
		}
		results = append(results, rec.result())
	}
}

// cellParser reads the cells of one CSV line by column name, keeping the
// first error.
type cellParser struct {
	cells []string
	index map[string]int
	err   error
}

// str is the cell of col, empty when the line is short or the header has
// no such column.
func (p *cellParser) str(col string) string {
	if i, ok := p.index[col]; ok && i < len(p.cells) {
		return p.cells[i]
	}
	return ""
}

func (p *cellParser) note(col string, err error) {
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%s %q: %v", col, p.str(col), err)
	}
}

func (p *cellParser) float(col string) float64 {
	v, err := strconv.ParseFloat(p.str(col), 64)
	p.note(col, err)
	return v
}

func (p *cellParser) int64(col string) int64 {
	v, err := strconv.ParseInt(p.str(col), 10, 64)
	p.note(col, err)
	return v
}

func (p *cellParser) int(col string) int { return int(p.int64(col)) }

func (p *cellParser) bool(col string) bool {
	v, err := strconv.ParseBool(p.str(col))
	p.note(col, err)
	return v
}
