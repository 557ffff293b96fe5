package report

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

	"github.com/loomgate/loomgate/lab/bench"
	"github.com/loomgate/loomgate/lab/bench/scrape"
)

// The files' records. A result is first made flat, with units in the
// field names (record, openRecord); JSON writes the flat form, and CSV
// takes its columns, each a name and how to write the cell, from it.

// ErrFormat is returned, wrapped with the line or field at fault, by
// ReadCSV and ReadJSON for input they cannot read back.
var ErrFormat = errors.New("report: malformed results")

// WriteJSON writes rows as an indented JSON array, one object per run,
// durations in milliseconds (fields ending _ms) and seconds (_s); for
// closed-loop results "sidecar" is null when there was no sidecar and
// "upstream_memory_bytes" 0 when the upstream's memory was not known, for
// open-loop results the sidecar's readings are under "sidecar" (null
// without one).
func WriteJSON[R Row](w io.Writer, rows []R) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(kindOf[R]().json(rows))
}

// WriteCSV writes rows with a header line. Columns only a sidecar fills
// are empty for rows without one, and upstream_memory_bytes when it is not
// known; an open-loop sidecar's readings over time are in the JSON only.
func WriteCSV[R Row](w io.Writer, rows []R) error {
	cw := csv.NewWriter(w)
	for _, line := range kindOf[R]().csv(rows) {
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// csvColumn is a column of results.csv over records of type T.
type csvColumn[T any] struct {
	name string
	cell func(T) string
}

// csvLines is the header and a line per row.
func csvLines[R, T any](rows []R, flat func(R) T, cols []csvColumn[T]) [][]string {
	lines := [][]string{names(cols)}
	for _, r := range rows {
		rec := flat(r)
		line := make([]string, len(cols))
		for i, c := range cols {
			line[i] = c.cell(rec)
		}
		lines = append(lines, line)
	}
	return lines
}

func names[T any](cols []csvColumn[T]) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.name
	}
	return out
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
func i64(v int64) string        { return strconv.FormatInt(v, 10) }

// sidecarCell is an empty cell for a record without a sidecar, else cell
// of its sidecar.
func sidecarCell[S, T any](sidecar func(T) *S, cell func(*S) string) func(T) string {
	return func(rec T) string {
		if s := sidecar(rec); s != nil {
			return cell(s)
		}
		return ""
	}
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
	// CPUPerRequestUS is 0 in files from before it was measured.
	CPUPerRequestUS float64 `json:"cpu_per_request_us"`
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func fromUS(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Microsecond))) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fromMS inverts ms exactly for any duration below about three years: both
// conversions round to the nearest float and back to the nearest
// nanosecond.
func fromMS(v float64) time.Duration { return time.Duration(math.Round(v * float64(time.Millisecond))) }

func toRecord(r bench.Result) record {
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
			CPUPerRequestUS: us(sc.CPUPerRequest),
		}
	}
	return rec
}

func (rec record) result() bench.Result {
	r := bench.Result{
		Scenario: rec.Scenario, Arm: rec.Arm, URL: rec.URL, Concurrency: rec.Concurrency,
		Window:   time.Duration(math.Round(rec.WindowS * float64(time.Second))),
		Requests: rec.Requests, RPS: rec.RPS,
		Mean: fromMS(rec.MeanMS), P50: fromMS(rec.P50MS), P95: fromMS(rec.P95MS), P99: fromMS(rec.P99MS), Max: fromMS(rec.MaxMS),
		Errors:              bench.Errors{Status: rec.ErrorsStatus, Timeout: rec.ErrorsTimeout, Connect: rec.ErrorsConnect},
		UpstreamMemoryBytes: rec.UpstreamMemoryBytes,
		Physics: bench.Verdict{
			Expected: rec.ExpectedRPS, Off: rec.Off, Ceiling: rec.CeilingRPS,
			Limit: rec.Limit, Service: fromMS(rec.ServiceMS),
			Flagged: rec.Flagged, Reason: rec.Reason,
		},
	}
	if sc := rec.Sidecar; sc != nil {
		r.Sidecar = &scrape.SidecarStats{
			Loomgate: sc.Loomgate, QueueWait: fromMS(sc.QueueMS), Service: fromMS(sc.ServiceMS),
			PeakInFlight: sc.PeakInFlight, PeakQueued: sc.PeakQueued, Limit: sc.Limit, MemoryBytes: sc.MemoryBytes,
			CPUPerRequest: fromUS(sc.CPUPerRequestUS),
		}
	}
	return r
}

// ReadJSON reads what WriteJSON wrote.
func ReadJSON(r io.Reader) ([]bench.Result, error) {
	var recs []record
	if err := json.NewDecoder(r).Decode(&recs); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	results := make([]bench.Result, len(recs))
	for i, rec := range recs {
		results[i] = rec.result()
	}
	return results, nil
}

// closedCSV are the columns of a closed-loop results.csv. Columns are only
// ever added at the end, so scripts that read by position keep working.
var closedCSV = func() []csvColumn[record] {
	type c = csvColumn[record]
	sc := func(name string, cell func(*sidecarRecord) string) c {
		return c{name, sidecarCell(func(r record) *sidecarRecord { return r.Sidecar }, cell)}
	}
	return []c{
		{"scenario", func(r record) string { return r.Scenario }},
		{"arm", func(r record) string { return r.Arm }},
		{"url", func(r record) string { return r.URL }},
		{"concurrency", func(r record) string { return strconv.Itoa(r.Concurrency) }},
		{"window_s", func(r record) string { return fmtFloat(r.WindowS) }},
		{"requests", func(r record) string { return i64(r.Requests) }},
		{"rps", func(r record) string { return fmtFloat(r.RPS) }},
		{"mean_ms", func(r record) string { return fmtFloat(r.MeanMS) }},
		{"p50_ms", func(r record) string { return fmtFloat(r.P50MS) }},
		{"p95_ms", func(r record) string { return fmtFloat(r.P95MS) }},
		{"p99_ms", func(r record) string { return fmtFloat(r.P99MS) }},
		{"max_ms", func(r record) string { return fmtFloat(r.MaxMS) }},
		{"errors_status", func(r record) string { return i64(r.ErrorsStatus) }},
		{"errors_timeout", func(r record) string { return i64(r.ErrorsTimeout) }},
		{"errors_connect", func(r record) string { return i64(r.ErrorsConnect) }},
		sc("sidecar_loomgate", func(s *sidecarRecord) string { return strconv.FormatBool(s.Loomgate) }),
		sc("queue_ms", func(s *sidecarRecord) string { return fmtFloat(s.QueueMS) }),
		sc("service_ms", func(s *sidecarRecord) string { return fmtFloat(s.ServiceMS) }),
		sc("peak_in_flight", func(s *sidecarRecord) string { return strconv.Itoa(s.PeakInFlight) }),
		sc("peak_queued", func(s *sidecarRecord) string { return strconv.Itoa(s.PeakQueued) }),
		sc("limit", func(s *sidecarRecord) string { return strconv.Itoa(s.Limit) }),
		sc("memory_bytes", func(s *sidecarRecord) string { return i64(s.MemoryBytes) }),
		{"expected_rps", func(r record) string { return fmtFloat(r.ExpectedRPS) }},
		{"physics_off", func(r record) string { return fmtFloat(r.Off) }},
		{"ceiling_rps", func(r record) string { return fmtFloat(r.CeilingRPS) }},
		{"physics_limit", func(r record) string { return strconv.Itoa(r.Limit) }},
		{"physics_service_ms", func(r record) string { return fmtFloat(r.ServiceMS) }},
		{"physics_flagged", func(r record) string { return strconv.FormatBool(r.Flagged) }},
		{"physics_reason", func(r record) string { return r.Reason }},
		{"upstream_memory_bytes", func(r record) string {
			if r.UpstreamMemoryBytes > 0 {
				return i64(r.UpstreamMemoryBytes)
			}
			return ""
		}},
		sc("cpu_per_request_us", func(s *sidecarRecord) string { return fmtFloat(s.CPUPerRequestUS) }),
	}
}()

// csvColumns is the header of a closed-loop results.csv.
var csvColumns = names(closedCSV)

// csvAdded are the columns added to csvColumns since results.csv was first
// written: files from before lack them, and read as if they were empty.
var csvAdded = map[string]bool{"upstream_memory_bytes": true, "cpu_per_request_us": true}

// ReadCSV reads what WriteCSV wrote. Columns are found by their header, so
// a file with columns added later still reads.
func ReadCSV(r io.Reader) ([]bench.Result, error) {
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
	var results []bench.Result
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
			if p.str("cpu_per_request_us") != "" {
				rec.Sidecar.CPUPerRequestUS = p.float("cpu_per_request_us")
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

// openRecord is the flat form of an OpenResult for JSON and CSV;
// durations in milliseconds.
type openRecord struct {
	Scenario    string  `json:"scenario"`
	Arm         string  `json:"arm"`
	URL         string  `json:"url"`
	Rate        float64 `json:"rate"`
	WindowS     float64 `json:"window_s"`
	MaxInFlight int     `json:"max_in_flight"`
	Due         int64   `json:"due"`
	Sent        int64   `json:"sent"`
	SendRate    float64 `json:"send_rate"`
	Late        int64   `json:"late"`
	SendLagP99  float64 `json:"send_lag_p99_ms"`
	SendLagMax  float64 `json:"send_lag_max_ms"`
	Throughput  float64 `json:"throughput"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`

	OK          int64 `json:"ok"`
	Unavailable int64 `json:"status_503"`
	GatewayTime int64 `json:"status_504"`
	OtherStatus int64 `json:"status_other"`
	Errors      int64 `json:"errors"`
	Timeouts    int64 `json:"timeouts"`
	NotSent     int64 `json:"not_sent"`

	RetryAfterN      int64 `json:"retry_after_n"`
	RetryAfterMin    int64 `json:"retry_after_min_s"`
	RetryAfterMedian int64 `json:"retry_after_median_s"`
	RetryAfterMax    int64 `json:"retry_after_max_s"`

	PeakInFlight int `json:"rig_peak_in_flight"`

	Sidecar *openSidecarRecord `json:"sidecar"`
}

type openSidecarRecord struct {
	Loomgate     bool             `json:"loomgate"`
	Limit        int              `json:"limit"`
	QueuedStart  int              `json:"queued_start"`
	QueuedEnd    int              `json:"queued_end"`
	PeakQueued   int              `json:"peak_queued"`
	PeakInFlight int              `json:"peak_in_flight"`
	Outcomes     map[string]int64 `json:"outcomes"`
	QueueP99Max  float64          `json:"queue_p99_max_ms"`
	Alerted      bool             `json:"alert_crossed"`
	AlertAtS     float64          `json:"alert_at_s"`
	Timeline     []queuePointRec  `json:"timeline"`
}

type queuePointRec struct {
	AtS       float64 `json:"at_s"`
	Queued    int     `json:"queued"`
	QueuedMax int     `json:"queued_max"`
	InFlight  int     `json:"in_flight"`
	QueueP99  float64 `json:"queue_p99_ms"`
}

func toOpenRecord(r bench.OpenResult) openRecord {
	c := r.Counts
	rec := openRecord{
		Scenario: r.Scenario, Arm: r.Arm, URL: r.URL, Rate: r.Rate, WindowS: r.Window.Seconds(), MaxInFlight: r.MaxInFlight,
		Due: r.Due, Sent: r.Sent, SendRate: r.SendRate, Late: r.Late, SendLagP99: ms(r.SendLagP99), SendLagMax: ms(r.SendLagMax),
		Throughput: r.Throughput, P50MS: ms(r.P50), P90MS: ms(r.P90), P99MS: ms(r.P99), MaxMS: ms(r.Max),
		OK: c.OK, Unavailable: c.Unavailable, GatewayTime: c.GatewayTime, OtherStatus: c.OtherStatus,
		Errors: c.Errors, Timeouts: c.Timeouts, NotSent: c.NotSent,
		RetryAfterN: r.RetryAfter.N, RetryAfterMin: r.RetryAfter.Min, RetryAfterMedian: r.RetryAfter.Median, RetryAfterMax: r.RetryAfter.Max,
		PeakInFlight: r.PeakInFlight,
	}
	if sc := r.Sidecar; sc != nil {
		s := &openSidecarRecord{
			Loomgate: sc.Loomgate, Limit: sc.Limit, QueuedStart: sc.QueuedStart, QueuedEnd: sc.QueuedEnd,
			PeakQueued: sc.PeakQueued, PeakInFlight: sc.PeakInFlight, Outcomes: sc.Outcomes,
			QueueP99Max: ms(sc.QueueP99Max), Alerted: sc.Alerted, AlertAtS: sc.AlertAt.Seconds(),
		}
		for _, p := range sc.Timeline {
			s.Timeline = append(s.Timeline, queuePointRec{AtS: p.At.Seconds(), Queued: p.Queued, QueuedMax: p.QueuedMax, InFlight: p.InFlight, QueueP99: ms(p.QueueP99)})
		}
		rec.Sidecar = s
	}
	return rec
}

// openCSV are the columns of an open-loop results.csv. Columns are only
// ever added at the end.
var openCSV = func() []csvColumn[openRecord] {
	type c = csvColumn[openRecord]
	type r = openRecord
	sc := func(name string, cell func(*openSidecarRecord) string) c {
		return c{name, sidecarCell(func(r openRecord) *openSidecarRecord { return r.Sidecar }, cell)}
	}
	return []c{
		{"scenario", func(r r) string { return r.Scenario }},
		{"arm", func(r r) string { return r.Arm }},
		{"url", func(r r) string { return r.URL }},
		{"rate", func(r r) string { return fmtFloat(r.Rate) }},
		{"window_s", func(r r) string { return fmtFloat(r.WindowS) }},
		{"max_in_flight", func(r r) string { return strconv.Itoa(r.MaxInFlight) }},
		{"due", func(r r) string { return i64(r.Due) }},
		{"sent", func(r r) string { return i64(r.Sent) }},
		{"send_rate", func(r r) string { return fmtFloat(r.SendRate) }},
		{"late", func(r r) string { return i64(r.Late) }},
		{"send_lag_p99_ms", func(r r) string { return fmtFloat(r.SendLagP99) }},
		{"send_lag_max_ms", func(r r) string { return fmtFloat(r.SendLagMax) }},
		{"throughput", func(r r) string { return fmtFloat(r.Throughput) }},
		{"p50_ms", func(r r) string { return fmtFloat(r.P50MS) }},
		{"p90_ms", func(r r) string { return fmtFloat(r.P90MS) }},
		{"p99_ms", func(r r) string { return fmtFloat(r.P99MS) }},
		{"max_ms", func(r r) string { return fmtFloat(r.MaxMS) }},
		{"ok", func(r r) string { return i64(r.OK) }},
		{"status_503", func(r r) string { return i64(r.Unavailable) }},
		{"status_504", func(r r) string { return i64(r.GatewayTime) }},
		{"status_other", func(r r) string { return i64(r.OtherStatus) }},
		{"errors", func(r r) string { return i64(r.Errors) }},
		{"timeouts", func(r r) string { return i64(r.Timeouts) }},
		{"not_sent", func(r r) string { return i64(r.NotSent) }},
		{"retry_after_n", func(r r) string { return i64(r.RetryAfterN) }},
		{"retry_after_min_s", func(r r) string { return i64(r.RetryAfterMin) }},
		{"retry_after_median_s", func(r r) string { return i64(r.RetryAfterMedian) }},
		{"retry_after_max_s", func(r r) string { return i64(r.RetryAfterMax) }},
		{"rig_peak_in_flight", func(r r) string { return strconv.Itoa(r.PeakInFlight) }},
		sc("sidecar_loomgate", func(s *openSidecarRecord) string { return strconv.FormatBool(s.Loomgate) }),
		sc("limit", func(s *openSidecarRecord) string { return strconv.Itoa(s.Limit) }),
		sc("queued_start", func(s *openSidecarRecord) string { return strconv.Itoa(s.QueuedStart) }),
		sc("queued_end", func(s *openSidecarRecord) string { return strconv.Itoa(s.QueuedEnd) }),
		sc("peak_queued", func(s *openSidecarRecord) string { return strconv.Itoa(s.PeakQueued) }),
		sc("peak_in_flight", func(s *openSidecarRecord) string { return strconv.Itoa(s.PeakInFlight) }),
		sc("rejected", func(s *openSidecarRecord) string {
			var n int64
			for k, v := range s.Outcomes {
				if strings.HasPrefix(k, "rejected_") {
					n += v
				}
			}
			return i64(n)
		}),
		sc("queue_p99_max_ms", func(s *openSidecarRecord) string { return fmtFloat(s.QueueP99Max) }),
		sc("alert_crossed", func(s *openSidecarRecord) string { return strconv.FormatBool(s.Alerted) }),
		sc("alert_at_s", func(s *openSidecarRecord) string { return fmtFloat(s.AlertAtS) }),
	}
}()

// openCSVColumns is the header of an open-loop results.csv.
var openCSVColumns = names(openCSV)
