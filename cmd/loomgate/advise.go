package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/loomgate/loomgate/internal/cli"
)

// adviseTimeout bounds the request to the admin listener, which never
// queues: a sidecar that does not answer within it is not answering.
const adviseTimeout = 10 * time.Second

// runAdvise is `loomgate advise`: GET a running sidecar's /advice and print
// it. It exits 1 when the sidecar cannot be asked, 2 on bad flags.
func runAdvise(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loomgate advise", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", "http://127.0.0.1:9090", "the sidecar's admin listener (LOOMGATE_ADMIN_LISTEN), as http://host:port")
	format := fs.String("format", "text", "text for people, json for scripts")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: loomgate advise [--admin URL] [--format text|json]

Asks a running sidecar what its last minute of traffic says about its
admission settings: the mode in force, the measured figures (throughput,
queue and service time, the upstream's capacity and saturation, its memory
per request) and a recommendation with its reasons.

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, ok := cli.Parse(fs, args, stderr); !ok {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loomgate advise: unexpected argument %q; it takes only flags (loomgate advise -h)\n", fs.Arg(0))
		return 2
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "loomgate advise: --format %q: want text or json\n", *format)
		return 2
	}
	u, err := url.Parse(*admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "loomgate advise: --admin %q: want the admin listener as http://host:port\n", *admin)
		return 2
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/advice"
	u.RawQuery = "format=" + *format

	ctx, cancel := context.WithTimeout(ctx, adviseTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate advise: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "loomgate advise: cannot reach the sidecar at %s: %v\n(is it running? --admin takes its LOOMGATE_ADMIN_LISTEN)\n", *admin, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "loomgate advise: reading the answer from %s: %v\n", *admin, err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "loomgate advise: %s answered %s; is --admin a loomgate admin listener?\n", u, resp.Status)
		return 1
	}
	stdout.Write(body)
	return 0
}
